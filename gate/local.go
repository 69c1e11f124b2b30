package gate

import "sync"

// Local is a gate kept in this process's memory: its line, ordered by an
// Order, and a count of slots held, against a Limit.
type Local struct {
	mu       sync.Mutex
	limit    Limit
	fixed    int     // limit's slots, if it is Fixed: read without a call
	learner  Learner // limit, if it learns
	order    Order
	inFlight int
	line     Line
}

var _ Gate = (*Local)(nil)

// New returns a gate whose capacity is limit's and whose line is in order's
// order; a nil order is FIFO. The limit must allow at least one slot at the
// start.
func New(limit Limit, order Order) (*Local, error) {
	if limit == nil || limit.Slots() < 1 {
		return nil, ErrBadCapacity
	}
	if order == nil {
		order = new(FIFO)
	}
	g := &Local{limit: limit, order: order}
	if f, ok := limit.(Fixed); ok {
		g.fixed = int(f)
	}
	g.learner, _ = limit.(Learner)
	if r, ok := limit.(Raiser); ok {
		r.OnRaise(g.raised)
	}
	return g, nil
}

// Join grants t a slot at once when one is free and nobody waits ahead of
// it, and puts it in line otherwise.
func (g *Local) Join(t *Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.State() != TicketNew {
		return
	}
	if g.inFlight < g.slots() && g.line.Len() == 0 {
		if t.Grant() {
			g.inFlight++
		}
		return // declined: the slot stays free
	}
	g.line.Push(t, g.order.Place(t))
}

// Leave takes t out of line, or gives back its slot if it had one.
func (g *Local) Leave(t *Ticket) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch t.State() {
	case TicketWaiting:
		g.line.Remove(t)
		t.End()
	case TicketGranted:
		t.End()
		g.inFlight--
		g.grant()
		return true
	}
	return false
}

// Release gives back t's slot, tells the limit how it went, and grants
// the first in line.
func (g *Local) Release(t *Ticket, o Outcome) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.State() != TicketGranted {
		return
	}
	t.End()
	if g.learner != nil {
		o.InFlight = g.inFlight
		g.learner.Observe(o)
	}
	g.inFlight--
	g.grant()
}

// raised is the limit saying it may have risen.
func (g *Local) raised() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grant()
}

// grant hands free slots to the line, first in line first; a ticket that
// declines passes its slot on. g.mu is held.
func (g *Local) grant() {
	for g.inFlight < g.slots() {
		t := g.line.Front()
		if t == nil {
			return
		}
		g.line.Remove(t)
		if t.Grant() {
			g.inFlight++
		}
	}
}

// slots is the limit's number of slots now. g.mu is held.
func (g *Local) slots() int {
	if g.fixed > 0 {
		return g.fixed
	}
	return g.limit.Slots()
}

// Stats reports capacity, slots held and tickets waiting.
func (g *Local) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{Capacity: g.slots(), InFlight: g.inFlight, Waiting: g.line.Len()}
}
