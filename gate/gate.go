// Package gate caps how many upstream calls are in flight at once. Callers
// line up for slots and are served strictly in the order they joined, so a
// group that joined earlier is never overtaken by one that joined later.
package gate

import (
	"context"
	"errors"
)

// Gate is a concurrency cap whose slots are granted in arrival order.
//
// Join is separate from waiting so that a caller can fix the order of a whole
// group (a wave) in one pass and let its members wait concurrently afterwards;
// with a blocking Acquire alone, goroutine scheduling would decide the order.
type Gate interface {
	// Join puts t at the back of the line. It never blocks. A ticket joins once.
	Join(t *Ticket)
	// Leave takes t out of the line. If t had already been granted a slot, the
	// slot is given back and Leave reports true. Leaving twice is harmless.
	Leave(t *Ticket) (hadSlot bool)
	// Release gives back the slot t holds. Releasing a ticket that holds no
	// slot does nothing, so a deferred Release is always safe.
	Release(t *Ticket)
	// Stats reports the gate's occupancy at this moment.
	Stats() Stats
}

// Stats is a snapshot of a gate's occupancy.
type Stats struct {
	Capacity int // slots in all
	InFlight int // slots held
	Waiting  int // tickets in line
}

// Ticket is one caller's place in line. The zero value is ready to Join. Its
// memory belongs to the caller, so that joining a gate does not allocate when
// a slot is free.
type Ticket struct {
	ready      chan struct{}
	onGrant    func() bool
	state      ticketState
	prev, next *Ticket // intrusive FIFO links, guarded by the gate's mutex
}

// OnGrant makes the gate call f when t is granted a slot, instead of
// closing a Ready channel: a holder that waits without a goroutine of its
// own (it starts one in f) costs the gate nothing but the ticket. f runs
// with the gate's lock held, so it must be quick and must not call the
// gate. If f returns false, t declines the slot: it is done, and the slot
// passes to the next in line. Call OnGrant before Join; Ready must not be
// used on such a ticket.
func (t *Ticket) OnGrant(f func() bool) { t.onGrant = f }

type ticketState uint8

const (
	ticketNew ticketState = iota
	ticketWaiting
	ticketGranted
	ticketDone
)

// Ready is closed once t holds a slot. Call it only after Join.
func (t *Ticket) Ready() <-chan struct{} { return t.ready }

// closed is a channel closed once, handed to tickets granted a slot at Join
// so that the fast path allocates nothing.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

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
