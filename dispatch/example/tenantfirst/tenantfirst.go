// Package tenantfirst is the worked example of docs/architecture.md: a
// stateful wave-release policy, with a metric, written outside package
// dispatch against its exported seams only. It is not wired to a setting;
// wiring it is one line of assemble (see the page).
//
// The policy: of each closed wave, every tenant's first member is put in
// line at once, and that tenant's other members of the wave once the
// first one's response has begun (or it ended without one). A tenant's
// burst then learns from one answer whether the upstream serves it before
// the rest of the burst takes slots; other tenants' first members are not
// held at all.
package tenantfirst

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/window"
)

// TenantFirst is the Releaser. Held, if set, observes how long each held
// member waited for its tenant's first response, in seconds
// (NewHeldHistogram makes one). The zero value is ready to use.
type TenantFirst struct {
	Held prometheus.Observer

	mu   sync.Mutex
	held int // members held now, for Waiting
}

var _ dispatch.Releaser = (*TenantFirst)(nil)

// NewHeldHistogram is the metric Held is meant for, to be registered
// with the proxy's others (parts.Parts.Metrics).
func NewHeldHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "sluice_tenant_first_held_seconds",
		Help:    "How long a member was held for the response of its tenant's first member of the wave.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 10),
	})
}

// held is the policy's own record of a member it held: its state per
// request, in a dispatch.Note rather than a field of dispatch.Member.
type held struct {
	since time.Time
	wait  time.Duration // how long it was held; final once it is in line
}

// heldNote is the record of each member TenantFirst held; a tenant's
// first member has none.
var heldNote = dispatch.NewNote[held]()

// Release joins each tenant's first member of w now, and the others once
// that member's response has begun.
func (p *TenantFirst) Release(w *window.Wave[*dispatch.Member], join func(*dispatch.Member)) {
	now := time.Now()
	firsts := map[string]*dispatch.Member{}
	rest := map[*dispatch.Member][]*dispatch.Member{}
	for _, m := range w.Items {
		tenant := m.Request().Tenant
		first := firsts[tenant]
		if first == nil {
			firsts[tenant] = m
			continue
		}
		heldNote.Make(m).since = now
		rest[first] = append(rest[first], m)
	}
	p.mu.Lock()
	for _, ms := range rest {
		p.held += len(ms)
	}
	p.mu.Unlock()
	for _, m := range w.Items {
		if firsts[m.Request().Tenant] != m {
			continue
		}
		join(m)
		if ms := rest[m]; len(ms) > 0 {
			// No goroutine waits: AfterBegun keeps the function, and
			// calls it on the goroutine that marks the response begun,
			// or at once if it has begun already.
			m.AfterBegun(func(bool) { p.let(ms, join) })
		}
	}
}

// let joins the members held behind a first one whose response began,
// in arrival order, and counts how long each was held.
func (p *TenantFirst) let(ms []*dispatch.Member, join func(*dispatch.Member)) {
	now := time.Now()
	p.mu.Lock()
	p.held -= len(ms)
	p.mu.Unlock()
	for _, m := range ms {
		h := heldNote.Peek(m)
		h.wait = now.Sub(h.since)
		if p.Held != nil && m.Unjoined() { // one that left is not counted
			p.Held.Observe(h.wait.Seconds())
		}
		join(m) // a member that left is not put in line: join says so
	}
}

// Waiting is how many members are held now, for a gauge.
func (p *TenantFirst) Waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// HeldFor is how long TenantFirst held m: zero for a tenant's first
// member of its wave, or one it never saw. Read it from the member's
// function.
func HeldFor(m *dispatch.Member) time.Duration {
	if h := heldNote.Peek(m); h != nil {
		return h.wait
	}
	return 0
}
