package gate

import "sync"

// Static is a gate with a fixed number of slots.
type Static struct {
	mu       sync.Mutex
	capacity int
	inFlight int
	waiting  int
	head     *Ticket
	tail     *Ticket
}

var _ Gate = (*Static)(nil)

// NewStatic returns a gate of capacity slots.
func NewStatic(capacity int) (*Static, error) {
	if capacity < 1 {
		return nil, ErrBadCapacity
	}
	return &Static{capacity: capacity}, nil
}

// Join puts t in line, granting it a slot at once when one is free and
// nobody is waiting ahead of it.
func (g *Static) Join(t *Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.state != ticketNew {
		return
	}
	if g.inFlight < g.capacity && g.head == nil {
		if t.onGrant != nil && !t.onGrant() {
			t.state = ticketDone // declined: the slot stays free
			return
		}
		g.inFlight++
		t.state = ticketGranted
		t.ready = closed
		return
	}
	t.state = ticketWaiting
	if t.onGrant == nil {
		t.ready = make(chan struct{})
	}
	t.prev = g.tail
	if g.tail != nil {
		g.tail.next = t
	} else {
		g.head = t
	}
	g.tail = t
	g.waiting++
}

// Leave takes t out of line, or gives back its slot if it had one.
func (g *Static) Leave(t *Ticket) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch t.state {
	case ticketWaiting:
		g.unlink(t)
		t.state = ticketDone
		return false
	case ticketGranted:
		g.release(t)
		return true
	}
	return false
}

// Release gives back t's slot; the longest-waiting ticket inherits it.
func (g *Static) Release(t *Ticket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.state == ticketGranted {
		g.release(t)
	}
}

// release hands t's slot to the head of the line, or frees it. g.mu is held.
func (g *Static) release(t *Ticket) {
	t.state = ticketDone
	for next := g.head; next != nil; next = g.head {
		g.unlink(next)
		if next.onGrant != nil {
			if !next.onGrant() {
				next.state = ticketDone // declined: the slot passes on
				continue
			}
			next.state = ticketGranted
			return
		}
		next.state = ticketGranted
		close(next.ready)
		return
	}
	g.inFlight--
}

// unlink removes a waiting ticket from the line. g.mu is held.
func (g *Static) unlink(t *Ticket) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		g.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		g.tail = t.prev
	}
	t.prev, t.next = nil, nil
	g.waiting--
}

// Stats reports capacity, slots held and tickets waiting.
func (g *Static) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Stats{Capacity: g.capacity, InFlight: g.inFlight, Waiting: g.waiting}
}
