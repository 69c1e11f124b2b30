package gatetest

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/gate"
)

// The conformance cases of a ticket's OnGrant callback.

// grantLog records, in order, the OnGrant calls of the tickets it made.
// The gate calls f from Join or Release, on the caller's goroutine.
type grantLog []string

// ticket returns a ticket whose OnGrant logs name and returns accept.
func (l *grantLog) ticket(name string, accept bool) *gate.Ticket {
	tk := new(gate.Ticket)
	tk.OnGrant(func() bool {
		*l = append(*l, name)
		return accept
	})
	return tk
}

func wantGrants(t *testing.T, l grantLog, want ...string) {
	t.Helper()
	if !slices.Equal(l, want) {
		t.Errorf("OnGrant calls = %v; want %v", l, want)
	}
}

func testOnGrantAtJoin(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(2)
	var l grantLog
	a := l.ticket("a", true)
	g.Join(a)
	wantGrants(t, l, "a")
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 1})
	wantReady(t, joinAll(g, 1), true) // the other slot is still free
	g.Join(l.ticket("b", true))       // none free: b waits, f not called yet
	wantGrants(t, l, "a")
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 2, Waiting: 1})
	g.Release(a, gate.Outcome{})
	wantGrants(t, l, "a", "b")
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 2})
}

// testOnGrantInLineFIFO mixes callback and channel tickets in one line:
// each kind is granted in its turn, and only in its turn.
func testOnGrantInLineFIFO(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	holder := new(gate.Ticket)
	g.Join(holder)
	var l grantLog
	f1, c2, f3, c4 := l.ticket("f1", true), new(gate.Ticket), l.ticket("f3", true), new(gate.Ticket)
	for _, tk := range []*gate.Ticket{f1, c2, f3, c4} {
		g.Join(tk)
	}
	wantGrants(t, l)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 4})
	g.Release(holder, gate.Outcome{})
	wantGrants(t, l, "f1")
	wantReady(t, []*gate.Ticket{c2, c4}, false, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 3})
	g.Release(f1, gate.Outcome{})
	wantGrants(t, l, "f1")
	wantReady(t, []*gate.Ticket{c2, c4}, true, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 2})
	g.Release(c2, gate.Outcome{})
	wantGrants(t, l, "f1", "f3")
	wantReady(t, []*gate.Ticket{c4}, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(f3, gate.Outcome{})
	wantReady(t, []*gate.Ticket{c4}, true)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1})
	g.Release(c4, gate.Outcome{})
	wantGrants(t, l, "f1", "f3") // each f called once
	wantStats(t, g, gate.Stats{Capacity: 1})
}

func testOnGrantDeclinedAtJoin(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	var l grantLog
	d := l.ticket("d", false)
	g.Join(d)
	wantGrants(t, l, "d")
	wantStats(t, g, gate.Stats{Capacity: 1})
	g.Release(d, gate.Outcome{}) // holds nothing: must not free a slot it never took
	ts := joinAll(g, 2)
	wantReady(t, ts, true, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	wantGrants(t, l, "d")
}

// testOnGrantDeclinedPassesSlotOn has tickets in line decline: the slot goes
// to the next in line, and is freed when nobody is left.
func testOnGrantDeclinedPassesSlotOn(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	holder := new(gate.Ticket)
	g.Join(holder)
	var l grantLog
	a := l.ticket("a", true)
	for _, tk := range []*gate.Ticket{l.ticket("d1", false), l.ticket("d2", false), a} {
		g.Join(tk)
	}
	c := joinAll(g, 1)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 4})
	g.Release(holder, gate.Outcome{})
	wantGrants(t, l, "d1", "d2", "a")
	wantReady(t, c, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(a, gate.Outcome{})
	wantReady(t, c, true)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1})
	// The only one in line declines: the slot is freed, not lost.
	g.Join(l.ticket("d3", false))
	g.Release(c[0], gate.Outcome{})
	wantGrants(t, l, "d1", "d2", "a", "d3")
	wantStats(t, g, gate.Stats{Capacity: 1})
	wantReady(t, joinAll(g, 2), true, false)
}

func testLeaveAfterDecline(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	var l grantLog
	atJoin := l.ticket("at join", false)
	g.Join(atJoin)
	if hadSlot := g.Leave(atJoin); hadSlot {
		t.Error("Leave(ticket declined at Join) = true; want false")
	}
	wantStats(t, g, gate.Stats{Capacity: 1})
	holder := new(gate.Ticket)
	g.Join(holder)
	inLine := l.ticket("in line", false)
	g.Join(inLine)
	ts := joinAll(g, 2)
	g.Release(holder, gate.Outcome{}) // inLine declines; ts[0] gets the slot
	wantGrants(t, l, "at join", "in line")
	if hadSlot := g.Leave(inLine); hadSlot {
		t.Error("Leave(ticket declined in line) = true; want false")
	}
	wantReady(t, ts, true, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(ts[0], gate.Outcome{}) // the line is intact: ts[1] is next
	wantReady(t, ts[1:], true)
	g.Release(ts[1], gate.Outcome{})
	wantStats(t, g, gate.Stats{Capacity: 1})
}
