package dispatch

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/gate"
)

// Requeue gives the member's slot back, waits d (a retry's backoff), and
// joins the back of the gate's line again; it returns once the member holds
// a slot anew, or ctx's error (fn's context: the client left or the wave
// deadline passed) without a slot. Only the member's function may call it.
//
// The back of the line, not the front: a retry has already had its turn
// with an upstream that is failing, and its backoff gives the slot to
// requests that have waited in order, so retries cannot starve fresh
// requests during an outage. It also needs nothing of a gate beyond Join,
// so every kind of gate supports it.
//
// The backoff holds fn's goroutine: a requeued member, unlike one waiting
// for its first slot, is not goroutine-free.
func (m *Member) Requeue(ctx context.Context, d time.Duration) error {
	s := m.s
	s.gate.Release(&m.ticket, m.outcome(time.Now(), errRetried))
	m.ticket = gate.Ticket{} // released tickets are done; a fresh one joins anew
	m.fillTicket()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.queued.Add(1) // waiting again, but already admitted: never shed here
	// Routed anew: the key that failed it may be held now, and another
	// take it (failover).
	s.route(m)
	if s.pacing != nil {
		// The retry spends its key's limits anew: it waits for them, as
		// a first attempt does.
		paced := make(chan struct{})
		var gone atomic.Bool
		s.pacing.Pace(m, func(*Member) { close(paced) }, func() bool { return !gone.Load() })
		select {
		case <-paced:
		case <-ctx.Done():
			gone.Store(true)
			s.queued.Add(-1)
			return ctx.Err()
		}
	}
	s.gate.Join(&m.ticket)
	select {
	case <-m.ticket.Ready():
		s.queued.Add(-1)
		err := s.waitHold(ctx, m)
		m.heldFrom = time.Now() // the backoff and the wait are not service
		if err == nil {
			err = s.released(m)
		}
		return err
	case <-ctx.Done():
		s.queued.Add(-1)
		s.gate.Leave(&m.ticket)
		return ctx.Err()
	}
}

// errRetried is what a requeued attempt tells the gate of its end: it
// failed, whatever answer it settled.
var errRetried = errors.New("dispatch: attempt failed, to be retried")
