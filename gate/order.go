package gate

// Order decides the order of a gate's line: each ticket gets a place as it
// joins, and the lowest place is granted first (ties in join order). A
// fair order gives places by the ticket's Key and Cost; FIFO by arrival.
type Order interface {
	// Place is t's place in line. It is called under the gate's lock when
	// t joins and finds no free slot, so it must be quick.
	Place(t *Ticket) uint64
}

// A Queue is a Local gate's line as a policy keeps it: who waits, and who
// is offered the next slot. An Order that only ranks tickets (Place) is kept in a line of its
// places (a Line); an order that must hear of every grant and release to rank them
// (Fair: its flows' slots in flight, its classes' starvation bound) is a
// Queue itself, and the gate hands it its line. All its methods run under
// the gate's lock, so they must be quick.
type Queue interface {
	// Free reports whether t, joining with a slot free and nobody in
	// line, may take the slot at once.
	Free(t *Ticket) bool
	// GrantedAtJoin is t having taken a free slot at Join.
	GrantedAtJoin(t *Ticket)
	// Push puts t, a new ticket, in line.
	Push(t *Ticket)
	// Remove takes t, which waits in line, out of it.
	Remove(t *Ticket)
	// Next takes out of line the ticket to offer the next slot to; nil
	// when none may have one now.
	Next() *Ticket
	// Taken is t, just taken out by Next, having accepted the slot (ok)
	// or declined it.
	Taken(t *Ticket, ok bool)
	// Released is t, which held a slot, having given it back.
	Released(t *Ticket)
	// Len is how many tickets wait.
	Len() int
}

// FIFO serves tickets in the order they joined: a retry that joins again
// goes to the back. The zero value is ready to use, by one gate.
type FIFO struct{ next uint64 }

var _ Order = (*FIFO)(nil)

// Place is one more than the last place given.
func (f *FIFO) Place(*Ticket) uint64 {
	f.next++
	return f.next
}
