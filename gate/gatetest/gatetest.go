// Package gatetest checks that a gate.Gate behaves as the gate package
// documents: Run for any gate with a FIFO line, RunLimit for one built on
// a gate.Limit. A new gate implementation calls them from its own tests, as
// a file system calls fstest.TestFS.
package gatetest

import (
	"context"
	"errors"
	"runtime"
	"slices"
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

// grantLog records, in order, the OnGrant calls of the tickets it made.
// The gate calls f from Join or Release, on the caller's goroutine.
type grantLog []string

// ticket returns a ticket whose OnGrant logs name and returns accept.
func (l *grantLog) ticket(name string, accept bool) *gate.Ticket {
	tk := new(gate.Ticket)
	tk.OnGrant(func() bool {
		*l = append(*l, name)
		return accept
	})
	return tk
}

func wantGrants(t *testing.T, l grantLog, want ...string) {
	t.Helper()
	if !slices.Equal(l, want) {
		t.Errorf("OnGrant calls = %v; want %v", l, want)
	}
}

func testOnGrantAtJoin(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(2)
	var l grantLog
	a := l.ticket("a", true)
	g.Join(a)
	wantGrants(t, l, "a")
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 1})
	wantReady(t, joinAll(g, 1), true) // the other slot is still free
	g.Join(l.ticket("b", true))       // none free: b waits, f not called yet
	wantGrants(t, l, "a")
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 2, Waiting: 1})
	g.Release(a, gate.Outcome{})
	wantGrants(t, l, "a", "b")
	wantStats(t, g, gate.Stats{Capacity: 2, InFlight: 2})
}

// testOnGrantInLineFIFO mixes callback and channel tickets in one line:
// each kind is granted in its turn, and only in its turn.
func testOnGrantInLineFIFO(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	holder := new(gate.Ticket)
	g.Join(holder)
	var l grantLog
	f1, c2, f3, c4 := l.ticket("f1", true), new(gate.Ticket), l.ticket("f3", true), new(gate.Ticket)
	for _, tk := range []*gate.Ticket{f1, c2, f3, c4} {
		g.Join(tk)
	}
	wantGrants(t, l)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 4})
	g.Release(holder, gate.Outcome{})
	wantGrants(t, l, "f1")
	wantReady(t, []*gate.Ticket{c2, c4}, false, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 3})
	g.Release(f1, gate.Outcome{})
	wantGrants(t, l, "f1")
	wantReady(t, []*gate.Ticket{c2, c4}, true, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 2})
	g.Release(c2, gate.Outcome{})
	wantGrants(t, l, "f1", "f3")
	wantReady(t, []*gate.Ticket{c4}, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(f3, gate.Outcome{})
	wantReady(t, []*gate.Ticket{c4}, true)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1})
	g.Release(c4, gate.Outcome{})
	wantGrants(t, l, "f1", "f3") // each f called once
	wantStats(t, g, gate.Stats{Capacity: 1})
}

func testOnGrantDeclinedAtJoin(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	var l grantLog
	d := l.ticket("d", false)
	g.Join(d)
	wantGrants(t, l, "d")
	wantStats(t, g, gate.Stats{Capacity: 1})
	g.Release(d, gate.Outcome{}) // holds nothing: must not free a slot it never took
	ts := joinAll(g, 2)
	wantReady(t, ts, true, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	wantGrants(t, l, "d")
}

// testOnGrantDeclinedPassesSlotOn has tickets in line decline: the slot goes
// to the next in line, and is freed when nobody is left.
func testOnGrantDeclinedPassesSlotOn(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	holder := new(gate.Ticket)
	g.Join(holder)
	var l grantLog
	a := l.ticket("a", true)
	for _, tk := range []*gate.Ticket{l.ticket("d1", false), l.ticket("d2", false), a} {
		g.Join(tk)
	}
	c := joinAll(g, 1)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 4})
	g.Release(holder, gate.Outcome{})
	wantGrants(t, l, "d1", "d2", "a")
	wantReady(t, c, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(a, gate.Outcome{})
	wantReady(t, c, true)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1})
	// The only one in line declines: the slot is freed, not lost.
	g.Join(l.ticket("d3", false))
	g.Release(c[0], gate.Outcome{})
	wantGrants(t, l, "d1", "d2", "a", "d3")
	wantStats(t, g, gate.Stats{Capacity: 1})
	wantReady(t, joinAll(g, 2), true, false)
}

func testLeaveAfterDecline(t *testing.T, newGate func(int) gate.Gate) {
	g := newGate(1)
	var l grantLog
	atJoin := l.ticket("at join", false)
	g.Join(atJoin)
	if hadSlot := g.Leave(atJoin); hadSlot {
		t.Error("Leave(ticket declined at Join) = true; want false")
	}
	wantStats(t, g, gate.Stats{Capacity: 1})
	holder := new(gate.Ticket)
	g.Join(holder)
	inLine := l.ticket("in line", false)
	g.Join(inLine)
	ts := joinAll(g, 2)
	g.Release(holder, gate.Outcome{}) // inLine declines; ts[0] gets the slot
	wantGrants(t, l, "at join", "in line")
	if hadSlot := g.Leave(inLine); hadSlot {
		t.Error("Leave(ticket declined in line) = true; want false")
	}
	wantReady(t, ts, true, false)
	wantStats(t, g, gate.Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(ts[0], gate.Outcome{}) // the line is intact: ts[1] is next
	wantReady(t, ts[1:], true)
	g.Release(ts[1], gate.Outcome{})
	wantStats(t, g, gate.Stats{Capacity: 1})
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
