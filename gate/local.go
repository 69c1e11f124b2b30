package gate

import "sync"

// Local is a gate kept in this process's memory: its line, ordered by an
// Order, and a count of slots held, against a Limit.
type Local struct {
	mu       sync.Mutex
	limit    Limit
	fixed    int     // limit's slots, if it is Fixed: read without a call
	learner  Learner // limit, if it learns
	inFlight int
	line     Queue
}

var _ Gate = (*Local)(nil)

// New returns a gate whose capacity is limit's and whose line is in order's
// order; a nil order is FIFO. The limit must allow at least one slot at the
// start. An order that is also a Queue (Fair) keeps the gate's line itself;
// any other is asked only for each ticket's place.
func New(limit Limit, order Order) (*Local, error) {
	if limit == nil || limit.Slots() < 1 {
		return nil, ErrBadCapacity
	}
	g := &Local{limit: limit}
	switch o := order.(type) {
	case nil:
		g.line = &placed{order: new(FIFO)}
	case Queue:
		g.line = o
	default:
		g.line = &placed{order: o}
	}
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
	if g.inFlight < g.slots() && g.line.Len() == 0 && g.line.Free(t) {
		if t.Grant() {
			g.inFlight++
			g.line.GrantedAtJoin(t)
		}
		return // declined: the slot stays free
	}
	g.line.Push(t)
	// A slot may be free with tickets waiting that may not have it (a
	// fair order's key at its MaxInFlight), or after the limit rose.
	g.grant()
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
		g.line.Released(t)
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
		o.InFlight = g.inFlight // with this call still counted
		g.learner.Observe(o)
	}
	g.inFlight--
	g.line.Released(t)
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
		t := g.line.Next()
		if t == nil {
			return
		}
		ok := t.Grant()
		if ok {
			g.inFlight++
		}
		g.line.Taken(t, ok)
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

// placed is the Queue of an order that only places tickets: a line in the
// places the Order gives each.
type placed struct {
	order Order
	line  Line
}

func (p *placed) Free(*Ticket) bool     { return true }
func (p *placed) GrantedAtJoin(*Ticket) {}
func (p *placed) Push(t *Ticket)        { p.line.Push(t, p.order.Place(t)) }
func (p *placed) Remove(t *Ticket)      { p.line.Remove(t) }
func (p *placed) Taken(*Ticket, bool)   {}
func (p *placed) Released(*Ticket)      {}
func (p *placed) Len() int              { return p.line.Len() }

func (p *placed) Next() *Ticket {
	t := p.line.Front()
	if t != nil {
		p.line.Remove(t)
	}
	return t
}
