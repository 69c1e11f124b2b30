package sim

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestPacingMakesUpLateness pins the schedule of a generation whose caller
// loses time between tokens (a late timer, a slow write to the client):
// each token is still ready at TTFT + n×PerToken after the start, since
// the lost time counts as generation time. Adding up each wait on its own
// made every token later by all the time lost before it.
func TestPacingMakesUpLateness(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttft, per, lost = 100 * time.Millisecond, 10 * time.Millisecond, 4 * time.Millisecond
		s := New(Config{TTFT: ttft, PerToken: per})
		defer s.Close()
		start := time.Now()
		g := s.newGeneration(0, 0)
		for n := range 100 {
			if err := g.waitFor(context.Background(), g.atToken(n)); err != nil {
				t.Fatal(err)
			}
			if got, want := time.Since(start), ttft+time.Duration(n)*per; got != want {
				t.Fatalf("token %d ready at %v; want %v", n, got, want)
			}
			time.Sleep(lost)
		}
	})
}

// TestPacingLateCallerNeverWaits: a caller slower than the generation
// (here 15 ms between tokens of 10 ms) finds every later token ready and
// never waits; its tokens come as fast as it asks for them.
func TestPacingLateCallerNeverWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const per, lost = 10 * time.Millisecond, 15 * time.Millisecond
		s := New(Config{PerToken: per})
		defer s.Close()
		start := time.Now()
		g := s.newGeneration(0, 0)
		for n := range 50 {
			if err := g.waitFor(context.Background(), g.atToken(n)); err != nil {
				t.Fatal(err)
			}
			if got, want := time.Since(start), time.Duration(n)*lost; got != want {
				t.Fatalf("token %d ready at %v; want %v (the caller's own pace)", n, got, want)
			}
			time.Sleep(lost)
		}
	})
}
