package gatetest

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/gate"
)

// The conformance cases of many callers at once: the cap is never exceeded.

func testCapNeverExceeded(t *testing.T, newGate func(int) gate.Gate) {
	synctest.Test(t, func(t *testing.T) {
		const capacity, callers = 3, 30
		g := newGate(capacity)
		peak := contend(callers, func(i int, held *occupancy) {
			time.Sleep(time.Duration(i%4) * time.Millisecond)
			tk := new(gate.Ticket)
			if err := gate.Acquire(t.Context(), g, tk); err != nil {
				t.Errorf("Acquire: %v", err)
				return
			}
			defer g.Release(tk, gate.Outcome{})
			held.hold(func() { time.Sleep(10 * time.Millisecond) })
		})
		if peak != capacity {
			t.Errorf("peak in flight = %d; want %d", peak, capacity)
		}
		wantStats(t, g, gate.Stats{Capacity: capacity})
	})
}

// contend runs f on callers goroutines at once, with each one's index,
// and returns the most slots they held at once.
func contend(callers int, f func(i int, held *occupancy)) int {
	var (
		held occupancy
		wg   sync.WaitGroup
	)
	for i := range callers {
		wg.Go(func() { f(i, &held) })
	}
	wg.Wait()
	return held.peakSeen()
}

// occupancy counts the callers holding a slot at once, and the most seen.
type occupancy struct {
	mu       sync.Mutex
	now, max int
}

// hold counts the caller in while it runs f.
func (o *occupancy) hold(f func()) {
	o.mu.Lock()
	o.now++
	o.max = max(o.max, o.now)
	o.mu.Unlock()
	f()
	o.mu.Lock()
	o.now--
	o.mu.Unlock()
}

func (o *occupancy) peakSeen() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.max
}

// testCapNeverExceededRealTime has goroutines contend in real time, so
// that the race detector and the runtime's scheduler, not a bubble's,
// choose the interleavings; some leave while they wait.
func testCapNeverExceededRealTime(t *testing.T, newGate func(int) gate.Gate) {
	const capacity, callers, rounds = 4, 16, 200
	g := newGate(capacity)
	peak := contend(callers, func(i int, held *occupancy) {
		for r := range rounds {
			ctx, cancel := context.WithCancel(context.Background())
			if (i+r)%7 == 0 {
				cancel() // some give up before or while they wait
			}
			tk := new(gate.Ticket)
			err := gate.Acquire(ctx, g, tk)
			cancel()
			if err != nil {
				continue
			}
			held.hold(runtime.Gosched) // let others try for a slot while this one holds it
			g.Release(tk, gate.Outcome{End: gate.EndOK})
		}
	})
	if peak > capacity {
		t.Errorf("peak in flight = %d; want at most %d", peak, capacity)
	}
	wantStats(t, g, gate.Stats{Capacity: capacity})
}
