package dispatch

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
)

// Tenants is the tenant policy, as the request path uses it: it names
// each request's tenant and class, counts what each tenant has waiting
// and in flight, sheds a tenant's request past its limit, and fills the
// gate ticket the fair order reads. The scheduler calls Enter for each
// member it admits, then exactly one of Left (it leaves without a slot)
// or Granted and, once its slot is given back for good, Done. Today's
// policy is package tenants' tenants.Table (TENANT_FROM, TENANT_MAX,
// TENANT_WEIGHTS, TENANT_MAX_CONCURRENT, TENANT_MAX_WAITING). The error
// it refuses with and the counts it reports are here, in the seam, so
// that the proxy reads them without knowing the policy.
type Tenants interface {
	// Identify names the tenant and class of the request d describes,
	// from h (the request's headers), d's inbound key and the policy's
	// source of names. (d is a copy: a pointer through an interface
	// would put every request's descriptor on the heap.)
	Identify(d request.Descriptor, h http.Header) (tenant string, class request.Class)
	// Enter counts r in as waiting for its tenant and returns the tenant
	// it is counted under, or refuses r with a *TenantFullError.
	Enter(r *request.Descriptor) (Tenant, error)
	// Ticket fills tk, the gate ticket of r (entered as t): its key, cost,
	// class, weight and limit.
	Ticket(tk *gate.Ticket, t Tenant, r *request.Descriptor)
	// Granted is r, waiting as t, taking a slot.
	Granted(t Tenant, r *request.Descriptor)
	// Left is r, waiting as t, leaving without a slot.
	Left(t Tenant, r *request.Descriptor)
	// Done is one of t's requests giving its slot back for good.
	Done(t Tenant)
	// AddTokens counts n tokens of usage to the tenant called name.
	AddTokens(name string, n int64)
	// Stats reports every tracked tenant's counts, for the metrics and
	// the page.
	Stats() []TenantStats
}

// Tenant is the tenant a request is counted under, as Enter returned it:
// the policy's own, handed back to it by Ticket, Granted, Left and Done.
type Tenant interface {
	Name() string
}

// TenantFullError is a request refused because its tenant already has
// Max requests waiting; other tenants are not refused.
type TenantFullError struct {
	Tenant string
	Max    int
}

func (e *TenantFullError) Error() string {
	return fmt.Sprintf("dispatch: tenant %s has %d requests waiting", e.Tenant, e.Max)
}

// TenantStats is one tracked tenant's counts: requests waiting and in
// flight now, and, since it was first tracked, requests shed and served
// and tokens of usage.
type TenantStats struct {
	Tenant   string `json:"tenant"`
	Waiting  int    `json:"waiting"`
	InFlight int    `json:"in_flight"`
	Shed     int64  `json:"shed"`
	Served   int64  `json:"served"`
	Tokens   int64  `json:"tokens"`
}

// Tenant is the tenant a member is counted under: its request's tenant, or
// the policy's shared one (tenants.OtherTenant).
func (m *Member) Tenant() string {
	if m.tenant == nil {
		return m.req.Tenant
	}
	return m.tenant.Name()
}
