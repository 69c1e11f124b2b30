// Package gate caps how many upstream calls are in flight at once. Callers
// line up for slots with a Ticket; how many slots there are is a Limit's to
// say, and the order of the line an Order's. The Local gate keeps both in
// memory; other gates (shared across processes, say) implement Gate in
// packages of their own, and gatetest checks any of them.
package gate

import (
	"context"
	"errors"
	"time"
)

// Gate is a concurrency cap whose slots are granted in the order of its
// line.
//
// Join is separate from waiting so that a caller can fix the order of a whole
// group (a wave) in one pass and let its members wait concurrently afterwards;
// with a blocking Acquire alone, goroutine scheduling would decide the order.
type Gate interface {
	// Join puts t in line. It never blocks. A ticket joins once.
	Join(t *Ticket)
	// Leave takes t out of the line. If t had already been granted a slot, the
	// slot is given back and Leave reports true. Leaving twice is harmless.
	Leave(t *Ticket) (hadSlot bool)
	// Release gives back the slot t holds, saying how its use went, so that
	// a limit can learn from it. Releasing a ticket that holds no slot does
	// nothing, so a deferred Release is always safe.
	Release(t *Ticket, o Outcome)
	// Stats reports the gate's occupancy. It is read on the request path
	// (admission estimates, metrics scrapes), so it must be cheap and must
	// never wait on I/O: a gate whose state lives elsewhere returns its
	// latest snapshot, however slightly stale.
	Stats() Stats
}

// Stats is a snapshot of a gate's occupancy.
type Stats struct {
	Capacity int // slots in all, as its limit now says
	InFlight int // slots held
	Waiting  int // tickets in line
}

// Outcome is how the use of one slot went.
type Outcome struct {
	Held time.Duration // how long the slot was held
	End  Ending
	// FirstToken is how long after the upstream call was sent its first
	// token came (a stream's first content event); zero when not known,
	// as for an answer that arrives whole. An adaptive limit reads it
	// rather than Held, which grows with the answer's length.
	FirstToken time.Duration
	// InFlight is the slots held when this one was given back, itself
	// included. The gate fills it in; the holder leaves it zero.
	InFlight int
}

// Ending is how an upstream call held in a slot ended.
type Ending uint8

const (
	EndUnknown     Ending = iota // the holder did not say
	EndOK                        // an answer, whatever it said
	EndOverloaded                // 529, another 5xx, or no answer at all
	EndRateLimited               // 429
	EndDeadline                  // the wave deadline cut it short
	EndCancelled                 // its client left
)

// ErrBadCapacity is returned when a gate is built with fewer than one slot.
var ErrBadCapacity = errors.New("gate: capacity must be at least 1")

// Acquire joins g and waits for a slot or for ctx to end. On success the
// caller owns a slot and must Release(t). A caller whose ctx has already
// ended gets its error and takes no slot, even a free one.
func Acquire(ctx context.Context, g Gate, t *Ticket) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.Join(t)
	select {
	case <-t.Ready():
		return nil
	case <-ctx.Done():
		g.Leave(t)
		return ctx.Err()
	}
}
