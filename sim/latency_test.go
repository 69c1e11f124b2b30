package sim

import (
	"context"
	"fmt"
	"os"
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

// TestPacingRealTime measures, on the real clock, how long 100,000
// streamed tokens at 50 µs each take (5 s of generation): run it by hand
// with SLUICE_SIM_TIMING=1 (docs/sim.md has the figures). It asserts no
// time, since a loaded machine's timers are late; it fails only past 3×.
func TestPacingRealTime(t *testing.T) {
	if os.Getenv("SLUICE_SIM_TIMING") != "1" {
		t.Skip("a real-time measurement: set SLUICE_SIM_TIMING=1")
	}
	s := New(Config{PerToken: 50 * time.Microsecond})
	defer s.Close()
	for _, stream := range []bool{true, false} {
		body := fmt.Sprintf(`{"model":"m","max_tokens":128000,"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
		d, code := timed(s, body, "x-sim-output-tokens", "100000")
		t.Logf("stream=%v: 100,000 tokens at 50µs in %v (want 5s), status %d", stream, d.Round(time.Millisecond), code)
		if code != 200 || d > 15*time.Second {
			t.Errorf("stream=%v: %d in %v; want 200 in about 5 s", stream, code, d)
		}
	}
}
