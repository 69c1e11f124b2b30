package budget

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/apierror"
)

// Reservations: work whose cost is known only later (bulk submissions,
// Message Batches) holds its estimate against the budgets until it
// settles.

// Estimate is what accepted work is expected to spend, in both of a
// budget's units: for a request, its prompt's estimated tokens and its
// max_tokens, and their price (request.Descriptor.Cost, as the pacing
// estimates it).
type Estimate struct {
	USD    float64
	Tokens float64
}

// Reservation is an Estimate held against the budgets of one tenant and
// key until its answers are counted: Release gives it back.
type Reservation struct {
	parts []holding
	once  sync.Once
}

type holding struct {
	t *tracked
	n float64
}

// Reserve holds e against every budget of tenant and of key, so that work
// accepted now and answered later (a bulk request, a Message Batch) is
// counted against them from its acceptance: its answers are counted by
// the ledger when they come (Spent), and its holder then calls Release.
// It refuses, holding nothing, with a 402 billing_error when e does not
// fit in what one of the budgets has left (its limit less its spend this
// period and what is held already). m's own budgets of their groups'
// budgets hold it too. With no budget of tenant, key or m (or a nil Set)
// it holds nothing and returns nil, nil.
func (s *Set) Reserve(tenant, key string, m Member, e Estimate) (*Reservation, *apierror.Error) {
	if s == nil {
		return nil, nil
	}
	x := s.idx.Load()
	ts := append(append([]*tracked(nil), x.byTenant[tenant]...), x.byKey[key]...)
	for _, t := range s.ofMember(x, m) {
		if !slices.Contains(ts, t) {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil, nil
	}
	s.reserving.Lock()
	defer s.reserving.Unlock()
	now := time.Now()
	for _, t := range ts {
		n := e.of(t.Unit)
		t.mu.Lock()
		t.roll(now)
		spent, held, reset, limit := t.spent, t.held, t.reset, t.Limit
		t.mu.Unlock()
		if spent+held+n <= limit {
			continue
		}
		s.refused.WithLabelValues(t.Name).Inc()
		left := max(limit-spent-held, 0)
		return nil, &apierror.Error{Status: http.StatusPaymentRequired, Type: "billing_error", NoRetry: true,
			Message: fmt.Sprintf("sluice budget %q (%s) cannot take this: its estimated cost, %s (every request's prompt and max_tokens, at the batch price), is more than the %s left of its %s limit this %s (%s spent, %s held for bulk requests and batches in progress); nothing was submitted. Send fewer requests or a lower max_tokens, wait for the work in progress to end, or for the reset at %s (in %s); or ask sluice's operator to raise the budget",
				t.Name, t.binds(), t.amount(n), t.amount(left), t.amount(limit), t.Period, t.amount(spent), t.amount(held), reset.Format(time.RFC3339), reset.Sub(now).Round(time.Second))}
	}
	r := &Reservation{parts: make([]holding, 0, len(ts))}
	for _, t := range ts {
		n := e.of(t.Unit)
		t.mu.Lock()
		t.held += n
		t.holds++
		t.mu.Unlock()
		r.parts = append(r.parts, holding{t, n})
	}
	return r, nil
}

// of is e in unit u.
func (e Estimate) of(u Unit) float64 {
	if u == Tokens {
		return e.Tokens
	}
	return e.USD
}

// Release gives r's hold back, once: its answers have been counted, or
// will never come. A nil Reservation holds nothing.
func (r *Reservation) Release() {
	if r == nil {
		return
	}
	r.once.Do(func() {
		for _, h := range r.parts {
			h.t.mu.Lock()
			if h.t.holds--; h.t.holds <= 0 {
				h.t.held, h.t.holds = 0, 0
			} else {
				h.t.held = max(h.t.held-h.n, 0)
			}
			h.t.mu.Unlock()
		}
	})
}
