package gatetest

import (
	"slices"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/gate"
)

// RunLimit checks a gate built on a limit: everything Run checks with a
// fixed limit, and that the gate follows a limit that changes and tells a
// limit that learns how each slot's use went. newGate returns a fresh gate
// on limit, with a FIFO line.
func RunLimit(t *testing.T, newGate func(limit gate.Limit) gate.Gate) {
	t.Helper()
	Run(t, func(capacity int) gate.Gate { return newGate(gate.Fixed(capacity)) })
	tests := []struct {
		name string
		run  func(t *testing.T, newGate func(gate.Limit) gate.Gate)
	}{
		{"LimitRises", testLimitRises},
		{"LimitFalls", testLimitFalls},
		{"LimitLearns", testLimitLearns},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newGate) })
	}
}

// changingLimit is a limit a test moves, and that records what it learns.
type changingLimit struct {
	mu       sync.Mutex
	slots    int
	raised   func()
	outcomes []gate.Outcome
}

func (l *changingLimit) Slots() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.slots
}

func (l *changingLimit) OnRaise(f func()) { l.raised = f }

func (l *changingLimit) Observe(o gate.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outcomes = append(l.outcomes, o)
}

// set moves the limit to n and, if it rose, tells the gate.
func (l *changingLimit) set(n int) {
	l.mu.Lock()
	rose := n > l.slots
	l.slots = n
	l.mu.Unlock()
	if rose && l.raised != nil {
		l.raised()
	}
}

func testLimitRises(t *testing.T, newGate func(gate.Limit) gate.Gate) {
	l := &changingLimit{slots: 1}
	g := newGate(l)
	ts := joinAll(g, 5)
	wantReady(t, ts, true, false, false, false, false)
	l.set(3) // the two longest waiting are granted at once
	wantReady(t, ts, true, true, true, false, false)
	wantStats(t, g, gate.Stats{Capacity: 3, InFlight: 3, Waiting: 2})
	g.Release(ts[0], gate.Outcome{})
	wantReady(t, ts[3:], true, false)
	wantStats(t, g, gate.Stats{Capacity: 3, InFlight: 3, Waiting: 1})
}

func testLimitFalls(t *testing.T, newGate func(gate.Limit) gate.Gate) {
	l := &changingLimit{slots: 3}
	g := newGate(l)
	ts := joinAll(g, 5)
	l.set(1) // slots held stay held
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 3, Waiting: 2})
	g.Release(ts[0], gate.Outcome{})
	g.Release(ts[1], gate.Outcome{})
	wantReady(t, ts[3:], false, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 2})
	g.Release(ts[2], gate.Outcome{}) // below the limit at last: the next is granted
	wantReady(t, ts[3:], true, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	late := joinAll(g, 1) // a newcomer waits behind the one in line
	wantReady(t, late, false)
}

func testLimitLearns(t *testing.T, newGate func(gate.Limit) gate.Gate) {
	l := &changingLimit{slots: 2}
	g := newGate(l)
	ts := joinAll(g, 3)
	sent := []gate.Outcome{{Held: 1, End: gate.EndOK, FirstToken: 3}, {Held: 2, End: gate.EndRateLimited}}
	g.Release(ts[1], sent[0])
	g.Release(ts[1], gate.Outcome{Held: 9}) // holds nothing now: nothing to learn
	g.Release(new(gate.Ticket), gate.Outcome{Held: 9})
	g.Release(ts[0], sent[1])
	// The gate says how many slots were held at each release, itself
	// included: both slots each time, since ts[2] took the first one back.
	want := slices.Clone(sent)
	want[0].InFlight, want[1].InFlight = 2, 2
	l.mu.Lock()
	got := slices.Clone(l.outcomes)
	l.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("limit observed %v; want %v", got, want)
	}
	wantReady(t, ts[2:], true)
}
