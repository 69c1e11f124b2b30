package proxy

import (
	"fmt"

	"github.com/sluicehq/sluice/apierror"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/metrics"
)

// tenantCounts is the tenants' counts for the metrics; none when
// windowing is off.
func (p *Proxy) tenantCounts() []metrics.TenantCounts {
	stats := p.Tenants()
	out := make([]metrics.TenantCounts, len(stats))
	for i, t := range stats {
		out[i] = metrics.TenantCounts(t)
	}
	return out
}

// Tenants reports each tracked tenant's counts (dispatch.OtherTenant
// first); nil when windowing is off.
func (p *Proxy) Tenants() []dispatch.TenantStats {
	if p.sched == nil {
		return nil
	}
	return p.tenants.Stats()
}

// tenantFull is the answer to a request shed because its tenant has
// TENANT_MAX_WAITING requests waiting.
func tenantFull(e *dispatch.TenantFullError) *apierror.Error {
	return &apierror.Error{Status: 529, Type: "overloaded_error", RetryAfter: 1,
		Message: fmt.Sprintf("sluice is overloaded for this tenant: it already has %d requests waiting for the upstream (TENANT_MAX_WAITING, or its inbound key's limit); other tenants are still served. Retry after the retry-after delay, or send fewer requests at once", e.Max)}
}
