package gate

// Order decides the order of a gate's line: each ticket gets a place as it
// joins, and the lowest place is granted first (ties in join order). A
// fair order gives places by the ticket's Key and Cost; FIFO by arrival.
type Order interface {
	// Place is t's place in line. It is called under the gate's lock when
	// t joins and finds no free slot, so it must be quick.
	Place(t *Ticket) uint64
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
