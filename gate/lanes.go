package gate

import (
	"sync"
	"sync/atomic"
)

// Lanes is a gate in front of which each ticket may first pass a lane of
// its own: a smaller gate that caps one share of the traffic (the calls
// on one upstream key, say), while the gate behind caps them all. A
// ticket with a Lane waits for a slot in its lane, then, holding it, for
// one in the gate behind; one without waits for the gate behind alone.
// Both slots are given back together. Waiting in the lane first keeps a
// full lane's tickets out of the line behind, so that they never hold
// back tickets of lanes with room.
//
// The lanes and the gate behind may be of any kind (in this process, or
// shared); the order within each is its own.
type Lanes struct {
	all   Gate
	lanes []Gate

	mu sync.Mutex // guards the inLane links of joined tickets
}

var _ Gate = (*Lanes)(nil)

// NewLanes returns a gate whose tickets of Lane i wait in lanes[i-1]
// before all.
func NewLanes(all Gate, lanes []Gate) *Lanes { return &Lanes{all: all, lanes: lanes} }

// Lane is lane i's own gate (i from 1), for its stats; nil if there is no
// such lane.
func (g *Lanes) Lane(i int) Gate {
	if i < 1 || i > len(g.lanes) {
		return nil
	}
	return g.lanes[i-1]
}

// Join puts t in its lane's line, or, without a lane, in the line of the
// gate behind.
func (g *Lanes) Join(t *Ticket) {
	lane := g.Lane(t.Lane)
	if lane == nil {
		g.all.Join(t)
		return
	}
	g.mu.Lock()
	if t.inLane != nil || t.state != TicketNew {
		g.mu.Unlock()
		return // a ticket joins once
	}
	in := &Ticket{Key: t.Key, Cost: t.Cost, Class: t.Class, Weight: t.Weight}
	t.inLane = in
	g.mu.Unlock()
	if t.onGrant == nil {
		// Its holder may wait on Ready as soon as Join returns, while the
		// ticket is still in its lane's line, in no line of the gate behind.
		t.ready = make(chan struct{})
	} else {
		// A ticket that declines its slot behind is done, and must not
		// keep its lane's: declined as it joins behind (still under its
		// lane's grant), the lane's slot is declined with it; declined
		// later, from the line behind, the lane's slot is given back off
		// that gate's lock (the lock order is always lane, then behind).
		accept := t.onGrant
		var step atomic.Int32 // joining behind, joined, or declined while joining
		const joining, joined, declined = 0, 1, 2
		t.onGrant = func() bool {
			// Marked held before accept runs: accept may hand the slot to
			// a holder that releases it at once, and a Release that found
			// it unmarked would do nothing, leaking both slots.
			atomic.StoreUint32(&t.heldBehind, 1)
			if accept() {
				return true
			}
			atomic.StoreUint32(&t.heldBehind, 0)
			if !step.CompareAndSwap(joining, declined) {
				go g.Leave(t)
			}
			return false
		}
		in.OnGrant(func() bool {
			g.all.Join(t)
			return step.CompareAndSwap(joining, joined)
		})
	}
	if in.onGrant == nil {
		// Granted under the lane's lock: the ticket joins the gate behind
		// from there.
		in.OnGrant(func() bool {
			g.all.Join(t)
			return true
		})
	}
	lane.Join(in)
}

// Leave takes t out of whichever line it waits in, and gives back the
// slots it holds; hadSlot reports the slot of the gate behind.
func (g *Lanes) Leave(t *Ticket) (hadSlot bool) {
	in, lane := g.laneOf(t)
	if lane != nil && !lane.Leave(in) {
		// It never got past its lane, so it never joined the gate behind
		// (a ticket that did joined under the lane's lock, before Leave
		// could find it there): it is done.
		g.mu.Lock()
		t.End()
		g.mu.Unlock()
		return false
	}
	return g.all.Leave(t)
}

// Release gives back the slots t holds, behind and in its lane. A
// ticket still in a line (its lane's, or behind with its lane's slot)
// holds no slot to give back: it stays there, its lane's slot with it.
func (g *Lanes) Release(t *Ticket, o Outcome) {
	if g.Lane(t.Lane) != nil && !grantedBehind(t) {
		return
	}
	g.all.Release(t, o)
	if in, lane := g.laneOf(t); lane != nil {
		lane.Release(in, o)
	}
}

// grantedBehind reports whether t, a ticket of a lane, was granted its
// slot behind (it may have given it back since).
func grantedBehind(t *Ticket) bool {
	if atomic.LoadUint32(&t.heldBehind) != 0 {
		return true
	}
	select {
	case <-t.ready: // nil (never joined, or an OnGrant ticket): never ready
		return true
	default:
		return false
	}
}

// laneOf is t's ticket in its lane, and the lane, and forgets them: each
// ticket leaves or is released once. lane is nil when t has none.
func (g *Lanes) laneOf(t *Ticket) (*Ticket, Gate) {
	g.mu.Lock()
	in := t.inLane
	t.inLane = nil
	g.mu.Unlock()
	if in == nil {
		return nil, nil
	}
	return in, g.Lane(t.Lane)
}

// Stats is the gate behind's: every lane's calls pass it.
func (g *Lanes) Stats() Stats { return g.all.Stats() }
