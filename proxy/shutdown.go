package proxy

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errShuttingDown is the cause with which Abort cuts every request still
// being served when the drain deadline passes.
var errShuttingDown = errors.New("sluice is shutting down")

// errShutdownCut answers a request cut by Abort before anything was sent:
// it may have waited in line (never sent upstream) or been in flight.
var errShutdownCut = backPressure(time.Second,
	"sluice is shutting down and could not finish this request within DRAIN_TIMEOUT_S; retry it after the retry-after delay, another instance or this one once restarted will serve it")

// inFlight is one Messages request being served, in the list that Abort
// cuts; it lives in the request's exchange, so that being listed costs
// the request no allocation.
type inFlight struct {
	prev, next *inFlight
	cancel     context.CancelCauseFunc
}

// servingSet is every Messages request being served, for Abort. A list
// under a lock rather than a context.AfterFunc on one stopping context
// per request: the AfterFunc, its registration among the stopping
// context's children and the closures around it were three to four
// allocations per request, for a cancellation that comes once, at
// shutdown.
type servingSet struct {
	mu      sync.Mutex
	head    *inFlight
	aborted bool // Abort has run: a request that begins now is cut at once
}

// begin starts serving one Messages request under parent (its client's
// context): the context it returns also ends, with errShuttingDown, when
// Abort is called. p.end(f) must be called once the request has been
// answered; f is the request's own, unused by any other.
func (p *Proxy) begin(parent context.Context, f *inFlight) context.Context {
	p.active.Add(1)
	ctx, cancel := context.WithCancelCause(parent)
	f.cancel = cancel
	s := &p.serving
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		cancel(errShuttingDown)
		return ctx
	}
	f.prev, f.next = nil, s.head
	if s.head != nil {
		s.head.prev = f
	}
	s.head = f
	s.mu.Unlock()
	return ctx
}

// end ends what begin(_, f) began.
func (p *Proxy) end(f *inFlight) {
	s := &p.serving
	s.mu.Lock()
	switch {
	case f.prev != nil:
		f.prev.next = f.next
	case s.head == f:
		s.head = f.next
	}
	if f.next != nil {
		f.next.prev = f.prev
	}
	f.prev, f.next = nil, nil
	s.mu.Unlock()
	f.cancel(nil)
	p.active.Add(-1)
}

// Abort cuts every Messages request still being served: those still in
// line are answered 429 "shutting down" with retry-after, those in flight
// have their upstream call cancelled and are answered the same way, and
// streams get an in-band error event. The server calls it when the drain
// deadline passes, then waits (Idle) for those answers before it closes
// the connections, so that nothing accepted ends without an answer.
func (p *Proxy) Abort() {
	s := &p.serving
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborted = true
	for f := s.head; f != nil; f = f.next {
		f.cancel(errShuttingDown) // never calls back into the set: end runs on the request's own goroutine
	}
}

// Idle waits until every Messages request has been answered, or ctx ends.
func (p *Proxy) Idle(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for p.active.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
