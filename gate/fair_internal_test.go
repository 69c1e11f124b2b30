package gate

import (
	"strconv"
	"testing"
)

// Fair forgets a key once it has nothing waiting and no slot and the line
// has emptied, so its memory follows the keys active at once.
func TestFairForgetsIdleKeys(t *testing.T) {
	f := NewFair(0)
	g, err := New(Fixed(2), f)
	if err != nil {
		t.Fatal(err)
	}
	var held []*Ticket
	for i := range 1000 {
		tk := &Ticket{Key: strconv.Itoa(i), Cost: 100}
		g.Join(tk)
		held = append(held, tk)
	}
	if n := len(f.keys); n != 1000 {
		t.Fatalf("%d keys remembered with 1000 active; want 1000", n)
	}
	for _, tk := range held {
		g.Release(tk, Outcome{})
	}
	if n := len(f.keys); n > 2 {
		t.Errorf("%d keys remembered after every ticket was served; want at most the last 2", n)
	}
	// Keys granted at Join, with nobody ever waiting, are forgotten as
	// new ones come.
	for i := range 10000 {
		tk := &Ticket{Key: "idle" + strconv.Itoa(i), Cost: 100}
		g.Join(tk)
		g.Release(tk, Outcome{})
	}
	if n := len(f.keys); n > 128 {
		t.Errorf("%d keys remembered after 10000 served one at a time; want at most 128", n)
	}
	if st := g.Stats(); st != (Stats{Capacity: 2}) {
		t.Errorf("Stats() = %+v; want an idle gate", st)
	}
}

// BenchmarkFairJoinRelease is BenchmarkLocalJoinRelease with a fair order.
func BenchmarkFairJoinRelease(b *testing.B) {
	g, err := New(Fixed(8), NewFair(0))
	if err != nil {
		b.Fatal(err)
	}
	var tk Ticket
	b.ReportAllocs()
	for b.Loop() {
		tk = Ticket{Key: "k", Cost: 1000}
		g.Join(&tk)
		<-tk.Ready()
		g.Release(&tk, Outcome{})
	}
}
