package proxy

import (
	"net/http"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/request"
)

// withinBudget is the budget check of the plain path (BATCH_ENABLED=0),
// which has no admission chain: the same check, dispatch.Budget, that the
// chain makes on the windowed path. It answers a request whose tenant or
// key has spent its budget, and reports false. Called by describe, once
// the tenant is known.
func (p *Proxy) withinBudget(w http.ResponseWriter, info *request.Descriptor, body heldBody) bool {
	if p.budgets == nil || p.sched != nil { // windowed: the admission chain asks
		return true
	}
	err := dispatch.Budget{Budgets: p.budgets}.Admit(info, dispatch.Load{})
	if err == nil {
		return true
	}
	p.bodies.release(body.reserved)
	apierror.WriteSluice(w, p.mapError(err))
	return false
}
