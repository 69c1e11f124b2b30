package bench

import (
	"math"
	"testing"
	"time"
)

func TestPercentiles(t *testing.T) {
	var vs []float64
	for i := 100; i >= 1; i-- { // 1..100, unsorted
		vs = append(vs, float64(i))
	}
	got := summarise(vs)
	want := Percentiles{N: 100, Mean: 50.5, P50: 50, P90: 90, P99: 99, Max: 100}
	if got != want {
		t.Fatalf("summarise(1..100) = %+v; want %+v", got, want)
	}
	if got := summarise([]float64{7}); got.P50 != 7 || got.P99 != 7 || got.Max != 7 {
		t.Fatalf("one value: %+v", got)
	}
	if got := summarise(nil); got != (Percentiles{}) {
		t.Fatalf("no values: %+v", got)
	}
	// Nearest rank: p90 of 1..10 is the 9th value, p99 the 10th.
	if p := percentile([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9); p != 9 {
		t.Fatalf("p90 of 1..10 = %v; want 9", p)
	}
}

func TestGoodput(t *testing.T) {
	if g := goodput(30, 2*time.Second); g != 15 {
		t.Fatalf("goodput(30, 2s) = %v; want 15", g)
	}
	if g := goodput(5, 0); g != 0 {
		t.Fatalf("goodput over no time = %v; want 0", g)
	}
}

// TestLittleOnKnownInput: 4 calls always in flight, each 100 ms long, give
// 40 calls/s and L = λW = 4.
func TestLittleOnKnownInput(t *testing.T) {
	var calls []Interval
	for slot := range 4 {
		for k := range 20 {
			s := time.Duration(k)*100*time.Millisecond + time.Duration(slot)*25*time.Millisecond
			calls = append(calls, Interval{Start: s, End: s + 100*time.Millisecond, Status: 200})
		}
	}
	var samples []Sample
	for ms := 0; ms < 2000; ms += 10 {
		samples = append(samples, Sample{T: time.Duration(ms) * time.Millisecond, UpstreamInflight: 4, GateInflight: 4})
	}
	l := littleOver(samples, calls, 500*time.Millisecond, 1500*time.Millisecond)
	if l == nil || l.MeanInflight != 4 || math.Abs(l.ThroughputRPS-40) > 1e-9 || math.Abs(l.MeanServiceMS-100) > 1e-9 {
		t.Fatalf("littleOver = %+v; want L 4, λ 40/s, W 100ms", l)
	}
	s := saturation(samples, calls, 4)
	if s == nil || math.Abs(s.Ratio-1) > 0.05 {
		t.Fatalf("saturation = %+v; want throughput ≈ cap/W", s)
	}
}
