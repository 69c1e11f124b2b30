package gate

import "time"

// Ticket is one caller's place in line. The zero value is ready to Join. Its
// memory belongs to the caller, so that joining a gate does not allocate when
// a slot is free.
//
// A gate implementation moves a ticket through its states with Grant, End
// and a Line, all under the gate's own lock.
type Ticket struct {
	// Key says whom the ticket is for (a tenant), and Cost what its call is
	// expected to cost, for an Order that shares the line fairly. Set them
	// before Join; the zero values are fine for a FIFO line.
	Key  string
	Cost int64
	// Class, Weight and MaxInFlight are for a fair order too (see Fair):
	// the ticket's priority class (ClassInteractive before ClassBatch),
	// its Key's share of the slots against other keys (0 means 1), and
	// how many slots its Key may hold at once (0: no limit). A FIFO line
	// ignores them.
	Class       Class
	Weight      float64
	MaxInFlight int
	// Lane is the lane of a Lanes gate the ticket waits in first: 1 for
	// the first lane, 0 for none. Other gates ignore it.
	Lane int

	inLane *Ticket // its ticket in its lane, while it has one (see Lanes)
	// heldBehind is 1 once a Lanes ticket with OnGrant accepted its slot
	// behind (atomic: set under that gate's lock, read by Release).
	heldBehind uint32

	ready      chan struct{}
	onGrant    func() bool
	state      TicketState
	place      uint64
	prev, next *Ticket // links of the Line it waits in (or of its Fair flow)

	// A Fair order's bookkeeping: the ticket's start tag, when it joined,
	// its flow, and its links in its class's list in join order.
	tag          float64
	joined       time.Duration
	flow         *fairFlow
	cprev, cnext *Ticket
}

// TicketState is where a ticket stands with the gate it joined.
type TicketState uint8

const (
	TicketNew     TicketState = iota // not yet joined
	TicketWaiting                    // in a Line
	TicketGranted                    // holds a slot
	TicketDone                       // left, released or declined
)

// OnGrant makes the gate call f when t is granted a slot, instead of
// closing a Ready channel: a holder that waits without a goroutine of its
// own (it starts one in f) costs the gate nothing but the ticket. f runs
// with the gate's lock held, so it must be quick and must not call the
// gate. If f returns false, t declines the slot: it is done, and the slot
// passes to the next in line. Call OnGrant before Join; Ready must not be
// used on such a ticket.
func (t *Ticket) OnGrant(f func() bool) { t.onGrant = f }

// Ready is closed once t holds a slot. Call it only after Join.
func (t *Ticket) Ready() <-chan struct{} { return t.ready }

// State is where t stands. A gate reads it under its lock.
func (t *Ticket) State() TicketState { return t.state }

// Grant gives t a slot: it calls t's OnGrant, or closes its Ready channel.
// It reports false if t declined the slot; t is then done, and the gate
// offers the slot to the next in line. A gate calls it once, under its
// lock, on a ticket that is new (a free slot at Join) or taken out of its
// Line.
func (t *Ticket) Grant() bool {
	if t.onGrant != nil {
		if !t.onGrant() {
			t.state = TicketDone
			return false
		}
	} else if t.ready == nil {
		t.ready = closed // granted at Join: nothing to allocate
	} else {
		close(t.ready)
	}
	t.state = TicketGranted
	return true
}

// End marks t done: its slot was given back, or it left the line.
func (t *Ticket) End() { t.state = TicketDone }

// closed is a channel closed once, handed to tickets granted a slot at Join
// so that the fast path allocates nothing.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Line is the line of tickets waiting at a gate, ordered by place (the
// lowest first, ties in the order they were pushed). It links the tickets
// themselves, so that it allocates nothing; guard it with the gate's lock.
// The zero value is an empty line.
type Line struct {
	head, tail *Ticket
	n          int
}

// Push puts t, a new ticket, in line at place, and readies it to wait.
// Places that only grow (a FIFO order) put it at the back at once.
func (l *Line) Push(t *Ticket, place uint64) {
	t.wait(place)
	after := l.tail
	for after != nil && after.place > place {
		after = after.prev
	}
	t.prev = after
	if after != nil {
		t.next = after.next
		after.next = t
	} else {
		t.next = l.head
		l.head = t
	}
	if t.next != nil {
		t.next.prev = t
	} else {
		l.tail = t
	}
	l.n++
}

// wait readies t, a new ticket, to wait in line at place.
func (t *Ticket) wait(place uint64) {
	t.state = TicketWaiting
	t.place = place
	if t.onGrant == nil && t.ready == nil { // a Lanes ticket has one already
		t.ready = make(chan struct{})
	}
}

// Remove takes t, which waits in l, out of it.
func (l *Line) Remove(t *Ticket) {
	lineLinks.remove(t, &l.head, &l.tail)
	l.n--
}

// links picks one pair of a ticket's links: those of the Line (or Fair
// flow) it waits in, or those of its Fair class's list.
type links func(t *Ticket) (prev, next **Ticket)

var (
	lineLinks  links = func(t *Ticket) (**Ticket, **Ticket) { return &t.prev, &t.next }
	classLinks links = func(t *Ticket) (**Ticket, **Ticket) { return &t.cprev, &t.cnext }
)

// remove takes t out of the list from head to tail that these links make.
func (l links) remove(t *Ticket, head, tail **Ticket) {
	prev, next := l(t)
	if *prev != nil {
		_, after := l(*prev)
		*after = *next
	} else {
		*head = *next
	}
	if *next != nil {
		before, _ := l(*next)
		*before = *prev
	} else {
		*tail = *prev
	}
	*prev, *next = nil, nil
}

// Front is the ticket first in line, or nil.
func (l *Line) Front() *Ticket { return l.head }

// Len is how many tickets wait in line.
func (l *Line) Len() int { return l.n }
