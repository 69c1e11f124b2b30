package dispatch

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/request"
)

// Admission is a policy on who may wait, and when a granted member may
// call: the queue bound, the client-timeout admission and the rate-limit
// hold each implement it, and a Chain runs several. Its methods are called
// on the request path, concurrently: they must be quick and must not
// block.
type Admission interface {
	// Admit decides whether r may wait for a slot; an error refuses it at
	// once, and is what its caller hears. r is nil when the scheduler asks
	// before the request is read (Scheduler.Full): refuse then only on what
	// holds for any request.
	Admit(r *request.Descriptor, l Load) error
	// HoldUntil is the time before which a member that holds its slot must
	// not start its call (zero, or past: go now). The member waits holding
	// its slot, so that everyone behind it keeps their place; it asks again
	// after each wait.
	HoldUntil(r *request.Descriptor) time.Time
	// Settle learns from an upstream answer to r: its status and headers.
	Settle(r *request.Descriptor, status int, h http.Header)
}

// Recheck is an Admission that looks at a request again when it is
// released: when its member holds its slot, just before its upstream
// call, and again before each retry's call (Requeue). A refusal there is
// what the member's caller hears; its call is never made, and its slot
// goes back telling the gate nothing of the upstream (gate.EndUnknown).
// It is what a limit that moves while requests wait (a budget that an
// answer spends) needs: checked on arrival alone, every request already
// waiting would go upstream. Called on the request path, concurrently,
// once a call: it must be quick and must not block.
type Recheck interface {
	Recheck(r *request.Descriptor) error
}

// rechecks are the admissions of a that look at a request again at its
// release, a Chain's in its order; nil when none does, so that the
// scheduler then spends nothing on it.
func rechecks(a Admission) []Recheck {
	var out []Recheck
	if c, ok := a.(Chain); ok {
		for _, a := range c {
			out = append(out, rechecks(a)...)
		}
		return out
	}
	if rc, ok := a.(Recheck); ok {
		out = append(out, rc)
	}
	return out
}

// Open admits every request, holds none and learns nothing. Embed it in a
// policy that implements only some of Admission.
type Open struct{}

var (
	_ Admission = Open{}
	_ Admission = Chain{}
)

func (Open) Admit(*request.Descriptor, Load) error        { return nil }
func (Open) HoldUntil(*request.Descriptor) time.Time      { return time.Time{} }
func (Open) Settle(*request.Descriptor, int, http.Header) {}

// Chain runs several admissions as one: a request is admitted when each
// admits it (the first refusal is its answer), held until the latest of
// their holds, and every one of them learns from each answer.
type Chain []Admission

func (c Chain) Admit(r *request.Descriptor, l Load) error {
	for _, a := range c {
		if err := a.Admit(r, l); err != nil {
			return err
		}
	}
	return nil
}

func (c Chain) HoldUntil(r *request.Descriptor) time.Time {
	var until time.Time
	for _, a := range c {
		if t := a.HoldUntil(r); t.After(until) {
			until = t
		}
	}
	return until
}

func (c Chain) Settle(r *request.Descriptor, status int, h http.Header) {
	for _, a := range c {
		a.Settle(r, status, h)
	}
}
