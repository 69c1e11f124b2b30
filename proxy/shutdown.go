package proxy

import (
	"context"
	"errors"
	"time"
)

// errShuttingDown is the cause with which Abort cuts every request still
// being served when the drain deadline passes.
var errShuttingDown = errors.New("sluice is shutting down")

// errShutdownCut answers a request cut by Abort before anything was sent:
// it may have waited in line (never sent upstream) or been in flight.
var errShutdownCut = &apiError{Status: 529, Type: "overloaded_error", RetryAfter: 1,
	Message: "sluice is shutting down and could not finish this request within DRAIN_TIMEOUT_S; retry it, another instance or this one once restarted will serve it"}

// begin starts serving one Messages request under parent (its client's
// context): the context it returns also ends, with errShuttingDown, when
// Abort is called. end must be called once the request has been answered.
func (p *Proxy) begin(parent context.Context) (ctx context.Context, end func()) {
	p.active.Add(1)
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(p.stopping, func() { cancel(errShuttingDown) })
	return ctx, func() {
		stop()
		cancel(nil)
		p.active.Add(-1)
	}
}

// Abort cuts every Messages request still being served: those still in
// line are answered 529 "shutting down" with retry-after, those in flight
// have their upstream call cancelled and are answered the same way, and
// streams get an in-band error event. The server calls it when the drain
// deadline passes, then waits (Idle) for those answers before it closes
// the connections, so that nothing accepted ends without an answer.
func (p *Proxy) Abort() { p.stop(errShuttingDown) }

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
