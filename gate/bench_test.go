package gate

import (
	"context"
	"testing"
)

// BenchmarkStaticJoinRelease is the uncontended cost of one slot: a Join
// granted at once and its Release.
func BenchmarkStaticJoinRelease(b *testing.B) {
	g, err := NewStatic(8)
	if err != nil {
		b.Fatal(err)
	}
	var tk Ticket
	b.ReportAllocs()
	for b.Loop() {
		tk = Ticket{} // a ticket joins once; a fresh one per request
		g.Join(&tk)
		<-tk.Ready()
		g.Release(&tk)
	}
}

// BenchmarkStaticAcquireContended has many goroutines share 8 slots, so most
// Acquires wait in line and are handed a slot by a Release.
func BenchmarkStaticAcquireContended(b *testing.B) {
	g, err := NewStatic(8)
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
			g.Release(&tk)
		}
	})
}
