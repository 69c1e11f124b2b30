package gate

import (
	"context"
	"testing"
)

// BenchmarkLocalJoinRelease is the uncontended cost of one slot: a Join
// granted at once and its Release.
func BenchmarkLocalJoinRelease(b *testing.B) {
	g, err := New(Fixed(8), nil)
	if err != nil {
		b.Fatal(err)
	}
	var tk Ticket
	b.ReportAllocs()
	for b.Loop() {
		tk = Ticket{} // a ticket joins once; a fresh one per request
		g.Join(&tk)
		<-tk.Ready()
		g.Release(&tk, Outcome{})
	}
}

// BenchmarkLocalAcquireContended has many goroutines share 8 slots, so most
// Acquires wait in line and are handed a slot by a Release.
func BenchmarkLocalAcquireContended(b *testing.B) {
	g, err := New(Fixed(8), nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		var tk Ticket
		for pb.Next() {
			tk = Ticket{}
			if err := Acquire(ctx, g, &tk); err != nil {
				b.Error(err)
				return
			}
			g.Release(&tk, Outcome{})
		}
	})
}
