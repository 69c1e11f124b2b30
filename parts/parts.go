// Package parts names the policies one proxy is built of: the gate, the
// admission chain, the pacing, the releaser, the tenant policy, the retry
// budget, the routes and the metrics they count in. package assemble
// makes them from the configuration (assemble.Build) and package proxy
// takes them (proxy.Options.Parts); the type is here, in neither, so
// that the proxy does not import the package that wires it.
package parts

import (
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/dispatch/buckets"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/retry"
	"github.com/sluicehq/sluice/route"
)

// Parts are the policies of one proxy.
type Parts struct {
	// Metrics are the collectors the parts count in; the proxy adds its
	// gauges (metrics.Watch) and serves them.
	Metrics *metrics.Metrics
	// Tenants names each Messages request's tenant and class, and on the
	// windowed path counts and limits them (TENANT_*).
	Tenants dispatch.Tenants
	// RetryBudget caps retries in place (RETRY_BUDGET_PERCENT).
	RetryBudget *retry.Budget
	// Pacer is the hold of RATE_LIMIT_PACING=reset, fed by every windowed
	// answer whatever the pacing.
	Pacer *pace.Pacer
	// Budgets are the config file's [[budgets]]; nil without any. They
	// hear spend from the ledger (spend.Ledger.Tell, the caller's to do:
	// it makes the ledger) and refuse in the admission chain, and, on
	// the plain path and the bulk endpoint, where their callers ask.
	Budgets *budget.Set

	// The windowed path's parts; all nil with BATCH_ENABLED=0.
	//
	// Gate caps the upstream calls in flight (BATCH_MAX_CONCURRENCY,
	// GATE_LIMIT, GATE_ORDER, GATE_BACKEND).
	Gate gate.Gate
	// Admission decides who may wait and holds granted calls: the
	// client-timeout admission (ADMIT_BY_CLIENT_TIMEOUT), the
	// BATCH_MAX_QUEUE bound and the reset hold (RATE_LIMIT_PACING=reset).
	Admission dispatch.Admission
	// Releaser puts each closed wave's members in line; nil: all at once
	// in arrival order.
	Releaser dispatch.Releaser
	// Buckets paces each upstream key by its rate-limit buckets
	// (RATE_LIMIT_PACING=buckets); nil otherwise.
	Buckets *buckets.Pacing
	// Cache is the cache-aware releaser (CACHE_AWARE), also Releaser;
	// nil otherwise.
	Cache *cacheaware.Release
	// Learners hear each windowed answer's usage after the pacing
	// (dispatch.Config.Learners): Cache, when set, to check what it
	// believes the API caches.
	Learners []dispatch.Learner

	// Routes are the config file's [[backends]] and their keys, and
	// Router the ROUTE_POLICY that picks among them, on both paths; nil
	// without backends. With windowing on, Gate is then a gate.Lanes:
	// a lane per key, capped at its backend's max_concurrency, in front
	// of BATCH_MAX_CONCURRENCY.
	Routes *route.Pool
	Router route.Router
}
