package gate_test

import (
	"testing"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/gate/gatetest"
)

// laned puts every ticket in lane 1 of g, so that the conformance suite
// drives tickets through a lane and the gate behind. Its Stats are the
// lane's when the lane caps (its tickets wait there), else the gate
// behind's.
type laned struct {
	*gate.Lanes
	laneCaps bool
}

func (g laned) Stats() gate.Stats {
	if g.laneCaps {
		return g.Lane(1).Stats()
	}
	return g.Lanes.Stats()
}

func (g laned) Join(t *gate.Ticket) {
	t.Lane = 1
	g.Lanes.Join(t)
}

func mustLocal(t *testing.T, n int) *gate.Local {
	t.Helper()
	g, err := gate.New(gate.Fixed(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestLanesConformance holds Lanes to every gate's contract twice: once
// capped by its lane (the gate behind has room to spare), once by the
// gate behind (the lane has).
func TestLanesConformance(t *testing.T) {
	t.Run("lane caps", func(t *testing.T) {
		gatetest.Run(t, func(n int) gate.Gate {
			return laned{gate.NewLanes(mustLocal(t, 1000), []gate.Gate{mustLocal(t, n)}), true}
		})
	})
	t.Run("behind caps", func(t *testing.T) {
		gatetest.Run(t, func(n int) gate.Gate {
			return laned{gate.NewLanes(mustLocal(t, n), []gate.Gate{mustLocal(t, 1000)}), false}
		})
	})
	t.Run("no lane", func(t *testing.T) {
		gatetest.Run(t, func(n int) gate.Gate {
			return gate.NewLanes(mustLocal(t, n), []gate.Gate{mustLocal(t, 1)})
		})
	})
}

func granted(tk *gate.Ticket) bool {
	select {
	case <-tk.Ready():
		return true
	default:
		return false
	}
}

// TestLanesFullLaneHoldsNobodyElse: a lane at its cap keeps its further
// tickets in its own line, so a ticket of another lane takes a free slot
// behind at once, although it joined after them.
func TestLanesFullLaneHoldsNobodyElse(t *testing.T) {
	all := mustLocal(t, 3)
	g := gate.NewLanes(all, []gate.Gate{mustLocal(t, 1), mustLocal(t, 2)})
	a1, a2, a3 := &gate.Ticket{Lane: 1}, &gate.Ticket{Lane: 1}, &gate.Ticket{Lane: 1}
	b1 := &gate.Ticket{Lane: 2}
	for _, tk := range []*gate.Ticket{a1, a2, a3, b1} {
		g.Join(tk)
	}
	if !granted(a1) || granted(a2) || granted(a3) || !granted(b1) {
		t.Fatalf("granted a1 a2 a3 b1 = %v %v %v %v; want true false false true", granted(a1), granted(a2), granted(a3), granted(b1))
	}
	if s := all.Stats(); s.InFlight != 2 || s.Waiting != 0 {
		t.Errorf("behind: %+v; want 2 in flight and nobody waiting (lane 1's wait in their lane)", s)
	}
	if s := g.Lane(1).Stats(); s.InFlight != 1 || s.Waiting != 2 {
		t.Errorf("lane 1: %+v; want 1 in flight, 2 waiting", s)
	}
	// a2 leaves its lane's line: a3 is next, and gets a1's slot.
	if g.Leave(a2) {
		t.Error("Leave(a2) reported a slot behind; it had none")
	}
	g.Release(a1, gate.Outcome{End: gate.EndOK})
	if !granted(a3) {
		t.Error("a3 was not granted lane 1's slot a1 gave back")
	}
	// Leaving with both slots gives both back.
	if !g.Leave(a3) {
		t.Error("Leave(a3) did not report its slot behind")
	}
	g.Release(b1, gate.Outcome{End: gate.EndOK})
	if s := all.Stats(); s.InFlight != 0 || s.Waiting != 0 {
		t.Errorf("behind at the end: %+v; want empty", s)
	}
	for i := 1; i <= 2; i++ {
		if s := g.Lane(i).Stats(); s.InFlight != 0 || s.Waiting != 0 {
			t.Errorf("lane %d at the end: %+v; want empty", i, s)
		}
	}
}

// TestLanesWaitBehind: a ticket with its lane's slot waits in the line
// behind when that is full, and leaving from there gives its lane slot
// back.
func TestLanesWaitBehind(t *testing.T) {
	all := mustLocal(t, 1)
	g := gate.NewLanes(all, []gate.Gate{mustLocal(t, 5)})
	first, second := &gate.Ticket{Lane: 1}, &gate.Ticket{Lane: 1}
	g.Join(first)
	g.Join(second)
	if !granted(first) || granted(second) {
		t.Fatal("want first granted, second waiting behind")
	}
	if s := g.Lane(1).Stats(); s.InFlight != 2 {
		t.Errorf("lane: %+v; want both holding lane slots", s)
	}
	if g.Leave(second) {
		t.Error("Leave(second) reported a slot behind; it was waiting")
	}
	if s := g.Lane(1).Stats(); s.InFlight != 1 {
		t.Errorf("lane after the leave: %+v; want 1 in flight", s)
	}
	g.Release(first, gate.Outcome{End: gate.EndOK})
	g.Release(first, gate.Outcome{End: gate.EndOK}) // twice is harmless
	if s := g.Lane(1).Stats(); s.InFlight != 0 {
		t.Errorf("lane at the end: %+v; want empty", s)
	}
}
