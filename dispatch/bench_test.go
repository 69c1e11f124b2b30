package dispatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/window"
)

// BenchmarkSchedulerDo is the scheduling cost of one request, HTTP aside:
// window, wave deadline, gate slot and the per-member context, around a
// no-op fn. 64 goroutines per CPU keep windows of 16 filling on size, as
// under the bursts sluice is for; MaxWait only catches the stragglers.
func BenchmarkSchedulerDo(b *testing.B) {
	g, err := gate.New(gate.Fixed(8), nil)
	if err != nil {
		b.Fatal(err)
	}
	var waves atomic.Int64
	s, err := New(Config{MaxSize: 16, MaxWait: 50 * time.Microsecond, Timeout: time.Minute}, g,
		Hooks{Flushed: func(uint64, int, window.Reason) { waves.Add(1) }})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	nop := func(context.Context, *Member) error { return nil }
	ctx := context.Background()
	req := &request.Descriptor{Model: "m"}
	b.ReportAllocs()
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Do(ctx, req, nop); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/float64(waves.Load()), "members/wave")
}

// BenchmarkSchedulerDoAlone is one request at a time with MaxSize 1: every
// Do opens, flushes and dispatches a wave of its own, with a free slot. It
// is the per-request floor with nothing to wait for, and every per-wave cost
// lands on one request.
func BenchmarkSchedulerDoAlone(b *testing.B) {
	g, err := gate.New(gate.Fixed(8), nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Config{MaxSize: 1, Timeout: time.Minute}, g, Hooks{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	nop := func(context.Context, *Member) error { return nil }
	ctx := context.Background()
	req := &request.Descriptor{Model: "m"}
	b.ReportAllocs()
	for b.Loop() {
		if err := s.Do(ctx, req, nop); err != nil {
			b.Fatal(err)
		}
	}
}
