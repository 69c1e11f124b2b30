package proxy

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/apierror"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/dispatch/tenants"
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

// Tenants reports each tracked tenant's counts (tenants.OtherTenant
// first); nil when windowing is off.
func (p *Proxy) Tenants() []dispatch.TenantStats {
	if p.sched == nil {
		return nil
	}
	return p.tenants.Stats()
}

// tenantFull is the answer to a request shed because its tenant has
// TENANT_MAX_WAITING requests waiting.
func (p *Proxy) tenantFull(e *dispatch.TenantFullError) *apierror.Error {
	return backPressure(p.drainWait(),
		fmt.Sprintf("sluice is holding back this request: its tenant already has %d requests waiting for the upstream (TENANT_MAX_WAITING, or its inbound key's max_waiting); other tenants are still served. Retry after the retry-after delay, or send fewer requests at once", e.Max))
}

// dropGatewayIdentity takes the identity headers of Anthropic's gateway
// out of h before it goes upstream: they name a developer to sluice (see
// TENANT_FROM=gateway), and the gateway refuses to send them to Anthropic
// itself, so that developers' emails never reach it.
func dropGatewayIdentity(h http.Header) {
	for _, name := range tenants.GatewayIdentityHeaders {
		delete(h, name)
	}
}
