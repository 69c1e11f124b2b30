// Package gatetest checks that a gate.Gate behaves as the gate package
// documents: Run for any gate with a FIFO line, RunLimit for one built on
// a gate.Limit. A new gate implementation calls them from its own tests, as
// a file system calls fstest.TestFS.
package gatetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/gate"
)

// Run checks a gate with a FIFO line. newGate returns a fresh gate of
// capacity slots.
func Run(t *testing.T, newGate func(capacity int) gate.Gate) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, newGate func(int) gate.Gate)
	}{
		{"FreeSlotsGrantedAtJoin", testFreeSlotsGrantedAtJoin},
		{"GrantsInJoinOrder", testGrantsInJoinOrder},
		{"WaitersServedInJoinOrder", testWaitersServedInJoinOrder},
		{"LeaveWaiting", testLeaveWaiting},
		{"LeaveGranted", testLeaveGranted},
		{"LeaveTwice", testLeaveTwice},
		{"ReleaseTwice", testReleaseTwice},
		{"ReleaseWithoutSlot", testReleaseWithoutSlot},
		{"JoinTwice", testJoinTwice},
		{"Stats", testStats},
		{"AcquireCancelledContext", testAcquireCancelledContext},
		{"AcquireWaitsForRelease", testAcquireWaitsForRelease},
		{"AcquireGivesUpAtDeadline", testAcquireGivesUpAtDeadline},
		{"CapNeverExceeded", testCapNeverExceeded},
		{"CapNeverExceededRealTime", testCapNeverExceededRealTime},
		{"OnGrantAtJoin", testOnGrantAtJoin},
		{"OnGrantInLineFIFO", testOnGrantInLineFIFO},
		{"OnGrantDeclinedAtJoin", testOnGrantDeclinedAtJoin},
		{"OnGrantDeclinedPassesSlotOn", testOnGrantDeclinedPassesSlotOn},
		{"LeaveAfterDecline", testLeaveAfterDecline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			tt.run(t, newGate)
		})
	}
}

// isReady reports whether t holds a slot, without waiting.
func isReady(t *gate.Ticket) bool {
	select {
	case <-t.Ready():
		return true
	default:
		return false
	}
}

func wantStats(t *testing.T, g gate.Gate, want gate.Stats) {
	t.Helper()
	if got := g.Stats(); got != want {
		t.Errorf("Stats() = %+v; want %+v", got, want)
	}
}

// joinAll joins n fresh tickets in order and returns them.
func joinAll(g gate.Gate, n int) []*gate.Ticket {
	ts := make([]*gate.Ticket, n)
	for i := range ts {
		ts[i] = new(gate.Ticket)
		g.Join(ts[i])
	}
	return ts
}

// wantReady checks which tickets hold a slot.
func wantReady(t *testing.T, ts []*gate.Ticket, want ...bool) {
	t.Helper()
	for i, tk := range ts {
		if got := isReady(tk); got != want[i] {
			t.Errorf("ticket %d ready = %v; want %v", i, got, want[i])
		}
	}
}

func testFreeSlotsGrantedAtJoin(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(3)
	ts := joinAll(g, 4)
	wantReady(t, ts, true, true, true, false)
	wantStats(t, g, gate.Stats{Capacity: 3, InFlight: 3, Waiting: 1})
}

func testGrantsInJoinOrder(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(2)
	ts := joinAll(g, 6)
	wantReady(t, ts, true, true, false, false, false, false)
	// Release out of order: the freed slot still goes to the longest waiter.
	g.Release(ts[1], gate.Outcome{})
	wantReady(t, ts[2:], true, false, false, false)
	g.Release(ts[0], gate.Outcome{})
	wantReady(t, ts[3:], true, false, false)
	g.Release(ts[3], gate.Outcome{})
	wantReady(t, ts[4:], true, false)
	// A newcomer lines up behind the one still waiting.
	late := new(gate.Ticket)
	g.Join(late)
	g.Release(ts[2], gate.Outcome{})
	wantReady(t, []*gate.Ticket{ts[5], late}, true, false)
	g.Release(ts[4], gate.Outcome{})
	wantReady(t, []*gate.Ticket{late}, true)
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 2, Waiting: 0})
}

// testWaitersServedInJoinOrder has goroutines wait concurrently after
// joining in a fixed order: the order of grants must not depend on which
// goroutine the scheduler runs first.
func testWaitersServedInJoinOrder(t *testing.T, newGate func(int) gate.Gate) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(1)
		holder := new(gate.Ticket)
		g.Join(holder)
		ts := joinAll(g, 8)
		var (
			mu    sync.Mutex
			order []int
			wg    sync.WaitGroup
		)
		for i := len(ts) - 1; i >= 0; i-- { // start them backwards on purpose
			wg.Go(func() {
				<-ts[i].Ready()
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				g.Release(ts[i], gate.Outcome{})
			})
		}
		synctest.Wait()
		g.Release(holder, gate.Outcome{})
		wg.Wait()
		for i, got := range order {
			if got != i {
				t.Fatalf("grant order = %v; want 0..%d in order", order, len(ts)-1)
			}
		}
		wantStats(t, g, gate.Stats{Capacity: 1})
	})
}

func testLeaveWaiting(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	ts := joinAll(g, 3)
	if hadSlot := g.Leave(ts[1]); hadSlot {
		t.Error("Leave(waiting ticket) = true; want false")
	}
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(ts[0], gate.Outcome{})
	wantReady(t, ts, true, false, true)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 0})
}

func testLeaveGranted(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	ts := joinAll(g, 2)
	if hadSlot := g.Leave(ts[0]); !hadSlot {
		t.Error("Leave(granted ticket) = false; want true")
	}
	wantReady(t, ts[1:], true)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 0})
	g.Release(ts[1], gate.Outcome{})
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 0, Waiting: 0})
}

func testLeaveTwice(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	ts := joinAll(g, 4)
	g.Leave(ts[0]) // slot passes to ts[1]
	if hadSlot := g.Leave(ts[0]); hadSlot {
		t.Error("second Leave of a granted ticket = true; want false")
	}
	g.Leave(ts[2])
	if hadSlot := g.Leave(ts[2]); hadSlot {
		t.Error("second Leave of a waiting ticket = true; want false")
	}
	wantReady(t, ts, true, true, false, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
}

func testReleaseTwice(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	ts := joinAll(g, 3)
	g.Release(ts[0], gate.Outcome{})
	g.Release(ts[0], gate.Outcome{}) // must not free ts[1]'s slot for ts[2]
	wantReady(t, ts[1:], true, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(ts[1], gate.Outcome{})
	g.Release(ts[1], gate.Outcome{})
	g.Release(ts[2], gate.Outcome{})
	g.Release(ts[2], gate.Outcome{})
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 0, Waiting: 0})
	// The gate still counts right: one slot, granted once.
	again := joinAll(g, 2)
	wantReady(t, again, true, false)
}

func testReleaseWithoutSlot(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	g.Release(new(gate.Ticket), gate.Outcome{}) // never joined
	ts := joinAll(g, 3)
	g.Release(ts[2], gate.Outcome{}) // waiting: stays in line
	wantReady(t, ts, true, false, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 2})
	g.Release(ts[0], gate.Outcome{})
	wantReady(t, ts[1:], true, false)
	g.Release(ts[1], gate.Outcome{})
	wantReady(t, ts[2:], true)
}

func testJoinTwice(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(2)
	tk := new(gate.Ticket)
	g.Join(tk)
	g.Join(tk)
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 1, Waiting: 0})
	ts := joinAll(g, 2)
	g.Join(ts[1])
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 2, Waiting: 1})
}

func testStats(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(2)
	wantStats(t, g, gate.Stats{Capacity: 2})
	ts := joinAll(g, 5)
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 2, Waiting: 3})
	g.Leave(ts[4])
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 2, Waiting: 2})
	g.Release(ts[0], gate.Outcome{})
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 2, Waiting: 1})
	for _, tk := range ts[:3] {
		g.Release(tk, gate.Outcome{}) // ts[1]'s slot passes to ts[3]; ts[2]'s is freed
	}
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 1, Waiting: 0})
	g.Release(ts[3], gate.Outcome{})
	wantStats(t, g, gate.Stats{Capacity: 2})
}

func testAcquireCancelledContext(t *testing.T, newGate func(int) gate.Gate) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// Both a free slot and a done context are ready at once; repeat so that
	// a coin-flip between them would show.
	for range 20 {
		g := newGate(1)
		if err := gate.Acquire(ctx, g, new(gate.Ticket)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire(cancelled ctx) on a free gate = %v; want context.Canceled", err)
		}
		wantStats(t, g, gate.Stats{Capacity: 1})
	}
	g := newGate(1)
	holder := new(gate.Ticket)
	g.Join(holder)
	tk := new(gate.Ticket)
	if err := gate.Acquire(ctx, g, tk); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire(cancelled ctx) on a full gate = %v; want context.Canceled", err)
	}
	wantPassedOver(t, g, holder, tk)
}

// wantPassedOver releases holder, the only slot's, and checks that tk,
// whose Acquire gave up, is not granted it.
func wantPassedOver(t *testing.T, g gate.Gate, holder, tk *gate.Ticket) {
	t.Helper()
	g.Release(holder, gate.Outcome{})
	if isReady(tk) {
		t.Error("a ticket whose Acquire gave up was granted the released slot")
	}
	wantStats(t, g, gate.Stats{Capacity: 1})
}

func testAcquireWaitsForRelease(t *testing.T, newGate func(int) gate.Gate) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(1)
		holder := new(gate.Ticket)
		if err := gate.Acquire(t.Context(), g, holder); err != nil {
			t.Fatalf("Acquire on a free gate: %v", err)
		}
		start := time.Now()
		done := make(chan error)
		go func() {
			tk := new(gate.Ticket)
			err := gate.Acquire(t.Context(), g, tk)
			if err == nil && time.Since(start) != time.Second {
				t.Errorf("Acquire returned after %v; want 1s", time.Since(start))
			}
			g.Release(tk, gate.Outcome{})
			done <- err
		}()
		synctest.Wait()
		wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
		time.Sleep(time.Second)
		g.Release(holder, gate.Outcome{})
		if err := <-done; err != nil {
			t.Fatalf("Acquire after a release: %v", err)
		}
		wantStats(t, g, gate.Stats{Capacity: 1})
	})
}

func testAcquireGivesUpAtDeadline(t *testing.T, newGate func(int) gate.Gate) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(1)
		holder := new(gate.Ticket)
		g.Join(holder)
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		tk := new(gate.Ticket)
		if err := gate.Acquire(ctx, g, tk); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v; want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("Acquire gave up after %v; want 3s", d)
		}
		wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 0})
		wantPassedOver(t, g, holder, tk)
	})
}
