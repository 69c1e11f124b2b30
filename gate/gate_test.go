package gate

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testGate is the suite every Gate implementation must pass. newGate returns
// a gate with capacity slots.
func testGate(t *testing.T, newGate func(capacity int) Gate) {
	tests := []struct {
		name string
		run  func(t *testing.T, newGate func(int) Gate)
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
		{"OnGrantAtJoin", testOnGrantAtJoin},
		{"OnGrantInLineFIFO", testOnGrantInLineFIFO},
		{"OnGrantDeclinedAtJoin", testOnGrantDeclinedAtJoin},
		{"OnGrantDeclinedPassesSlotOn", testOnGrantDeclinedPassesSlotOn},
		{"LeaveAfterDecline", testLeaveAfterDecline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newGate) })
	}
}

func TestStatic(t *testing.T) {
	testGate(t, func(capacity int) Gate {
		g, err := NewStatic(capacity)
		if err != nil {
			t.Fatalf("NewStatic(%d): %v", capacity, err)
		}
		return g
	})
}

func TestNewStaticRejectsBadCapacity(t *testing.T) {
	for _, c := range []int{0, -1} {
		g, err := NewStatic(c)
		if !errors.Is(err, ErrBadCapacity) || g != nil {
			t.Errorf("NewStatic(%d) = %v, %v; want nil, ErrBadCapacity", c, g, err)
		}
	}
}

// isReady reports whether t holds a slot, without waiting.
func isReady(t *Ticket) bool {
	select {
	case <-t.Ready():
		return true
	default:
		return false
	}
}

func wantStats(t *testing.T, g Gate, want Stats) {
	t.Helper()
	if got := g.Stats(); got != want {
		t.Errorf("Stats() = %+v; want %+v", got, want)
	}
}

// joinAll joins n fresh tickets in order and returns them.
func joinAll(g Gate, n int) []*Ticket {
	ts := make([]*Ticket, n)
	for i := range ts {
		ts[i] = new(Ticket)
		g.Join(ts[i])
	}
	return ts
}

// wantReady checks which tickets hold a slot.
func wantReady(t *testing.T, ts []*Ticket, want ...bool) {
	t.Helper()
	for i, tk := range ts {
		if got := isReady(tk); got != want[i] {
			t.Errorf("ticket %d ready = %v; want %v", i, got, want[i])
		}
	}
}

func testFreeSlotsGrantedAtJoin(t *testing.T, newGate func(int) Gate) {
	g := newGate(3)
	ts := joinAll(g, 4)
	wantReady(t, ts, true, true, true, false)
	wantStats(t, g, Stats{Capacity: 3, InFlight: 3, Waiting: 1})
}

func testGrantsInJoinOrder(t *testing.T, newGate func(int) Gate) {
	g := newGate(2)
	ts := joinAll(g, 6)
	wantReady(t, ts, true, true, false, false, false, false)
	// Release out of order: the freed slot still goes to the longest waiter.
	g.Release(ts[1])
	wantReady(t, ts[2:], true, false, false, false)
	g.Release(ts[0])
	wantReady(t, ts[3:], true, false, false)
	g.Release(ts[3])
	wantReady(t, ts[4:], true, false)
	// A newcomer lines up behind the one still waiting.
	late := new(Ticket)
	g.Join(late)
	g.Release(ts[2])
	wantReady(t, []*Ticket{ts[5], late}, true, false)
	g.Release(ts[4])
	wantReady(t, []*Ticket{late}, true)
	wantStats(t, g, Stats{Capacity: 2, InFlight: 2, Waiting: 0})
}

// testWaitersServedInJoinOrder has goroutines wait concurrently after
// joining in a fixed order: the order of grants must not depend on which
// goroutine the scheduler runs first.
func testWaitersServedInJoinOrder(t *testing.T, newGate func(int) Gate) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(1)
		holder := new(Ticket)
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
				g.Release(ts[i])
			})
		}
		synctest.Wait()
		g.Release(holder)
		wg.Wait()
		for i, got := range order {
			if got != i {
				t.Fatalf("grant order = %v; want 0..%d in order", order, len(ts)-1)
			}
		}
		wantStats(t, g, Stats{Capacity: 1})
	})
}

func testLeaveWaiting(t *testing.T, newGate func(int) Gate) {
	g := newGate(1)
	ts := joinAll(g, 3)
	if hadSlot := g.Leave(ts[1]); hadSlot {
		t.Error("Leave(waiting ticket) = true; want false")
	}
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(ts[0])
	wantReady(t, ts, true, false, true)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 0})
}

func testLeaveGranted(t *testing.T, newGate func(int) Gate) {
	g := newGate(1)
	ts := joinAll(g, 2)
	if hadSlot := g.Leave(ts[0]); !hadSlot {
		t.Error("Leave(granted ticket) = false; want true")
	}
	wantReady(t, ts[1:], true)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 0})
	g.Release(ts[1])
	wantStats(t, g, Stats{Capacity: 1, InFlight: 0, Waiting: 0})
}

func testLeaveTwice(t *testing.T, newGate func(int) Gate) {
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
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 1})
}

func testReleaseTwice(t *testing.T, newGate func(int) Gate) {
	g := newGate(1)
	ts := joinAll(g, 3)
	g.Release(ts[0])
	g.Release(ts[0]) // must not free ts[1]'s slot for ts[2]
	wantReady(t, ts[1:], true, false)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(ts[1])
	g.Release(ts[1])
	g.Release(ts[2])
	g.Release(ts[2])
	wantStats(t, g, Stats{Capacity: 1, InFlight: 0, Waiting: 0})
	// The gate still counts right: one slot, granted once.
	again := joinAll(g, 2)
	wantReady(t, again, true, false)
}

func testReleaseWithoutSlot(t *testing.T, newGate func(int) Gate) {
	g := newGate(1)
	g.Release(new(Ticket)) // never joined
	ts := joinAll(g, 3)
	g.Release(ts[2]) // waiting: stays in line
	wantReady(t, ts, true, false, false)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 2})
	g.Release(ts[0])
	wantReady(t, ts[1:], true, false)
	g.Release(ts[1])
	wantReady(t, ts[2:], true)
}

func testJoinTwice(t *testing.T, newGate func(int) Gate) {
	g := newGate(2)
	tk := new(Ticket)
	g.Join(tk)
	g.Join(tk)
	wantStats(t, g, Stats{Capacity: 2, InFlight: 1, Waiting: 0})
	ts := joinAll(g, 2)
	g.Join(ts[1])
	wantStats(t, g, Stats{Capacity: 2, InFlight: 2, Waiting: 1})
}

func testStats(t *testing.T, newGate func(int) Gate) {
	g := newGate(2)
	wantStats(t, g, Stats{Capacity: 2})
	ts := joinAll(g, 5)
	wantStats(t, g, Stats{Capacity: 2, InFlight: 2, Waiting: 3})
	g.Leave(ts[4])
	wantStats(t, g, Stats{Capacity: 2, InFlight: 2, Waiting: 2})
	g.Release(ts[0])
	wantStats(t, g, Stats{Capacity: 2, InFlight: 2, Waiting: 1})
	for _, tk := range ts[:3] {
		g.Release(tk) // ts[1]'s slot passes to ts[3]; ts[2]'s is freed
	}
	wantStats(t, g, Stats{Capacity: 2, InFlight: 1, Waiting: 0})
	g.Release(ts[3])
	wantStats(t, g, Stats{Capacity: 2})
}

func testAcquireCancelledContext(t *testing.T, newGate func(int) Gate) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	// Both a free slot and a done context are ready at once; repeat so that
	// a coin-flip between them would show.
	for range 20 {
		g := newGate(1)
		if err := Acquire(ctx, g, new(Ticket)); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire(cancelled ctx) on a free gate = %v; want context.Canceled", err)
		}
		wantStats(t, g, Stats{Capacity: 1})
	}
	g := newGate(1)
	holder := new(Ticket)
	g.Join(holder)
	tk := new(Ticket)
	if err := Acquire(ctx, g, tk); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire(cancelled ctx) on a full gate = %v; want context.Canceled", err)
	}
	g.Release(holder)
	if isReady(tk) {
		t.Error("a ticket whose Acquire failed was granted the released slot")
	}
	wantStats(t, g, Stats{Capacity: 1})
}

func testAcquireWaitsForRelease(t *testing.T, newGate func(int) Gate) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(1)
		holder := new(Ticket)
		if err := Acquire(t.Context(), g, holder); err != nil {
			t.Fatalf("Acquire on a free gate: %v", err)
		}
		start := time.Now()
		done := make(chan error)
		go func() {
			tk := new(Ticket)
			err := Acquire(t.Context(), g, tk)
			if err == nil && time.Since(start) != time.Second {
				t.Errorf("Acquire returned after %v; want 1s", time.Since(start))
			}
			g.Release(tk)
			done <- err
		}()
		synctest.Wait()
		wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 1})
		time.Sleep(time.Second)
		g.Release(holder)
		if err := <-done; err != nil {
			t.Fatalf("Acquire after a release: %v", err)
		}
		wantStats(t, g, Stats{Capacity: 1})
	})
}

func testAcquireGivesUpAtDeadline(t *testing.T, newGate func(int) Gate) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(1)
		holder := new(Ticket)
		g.Join(holder)
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		tk := new(Ticket)
		if err := Acquire(ctx, g, tk); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v; want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("Acquire gave up after %v; want 3s", d)
		}
		wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 0})
		g.Release(holder)
		if isReady(tk) {
			t.Error("a ticket whose Acquire timed out was granted the released slot")
		}
		wantStats(t, g, Stats{Capacity: 1})
	})
}

func testCapNeverExceeded(t *testing.T, newGate func(int) Gate) {
	synctest.Test(t, func(t *testing.T) {
		const capacity, callers = 3, 30
		g := newGate(capacity)
		var (
			mu             sync.Mutex
			inFlight, peak int
			wg             sync.WaitGroup
		)
		for i := range callers {
			wg.Go(func() {
				time.Sleep(time.Duration(i%4) * time.Millisecond)
				tk := new(Ticket)
				if err := Acquire(t.Context(), g, tk); err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				defer g.Release(tk)
				mu.Lock()
				inFlight++
				peak = max(peak, inFlight)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				mu.Lock()
				inFlight--
				mu.Unlock()
			})
		}
		wg.Wait()
		if peak != capacity {
			t.Errorf("peak in flight = %d; want %d", peak, capacity)
		}
		wantStats(t, g, Stats{Capacity: capacity})
	})
}

// grantLog records, in order, the OnGrant calls of the tickets it made.
// The gate calls f from Join or Release, on the caller's goroutine.
type grantLog []string

// ticket returns a ticket whose OnGrant logs name and returns accept.
func (l *grantLog) ticket(name string, accept bool) *Ticket {
	tk := new(Ticket)
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

func testOnGrantAtJoin(t *testing.T, newGate func(int) Gate) {
	g := newGate(2)
	var l grantLog
	a := l.ticket("a", true)
	g.Join(a)
	wantGrants(t, l, "a")
	wantStats(t, g, Stats{Capacity: 2, InFlight: 1})
	wantReady(t, joinAll(g, 1), true) // the other slot is still free
	g.Join(l.ticket("b", true))       // none free: b waits, f not called yet
	wantGrants(t, l, "a")
	wantStats(t, g, Stats{Capacity: 2, InFlight: 2, Waiting: 1})
	g.Release(a)
	wantGrants(t, l, "a", "b")
	wantStats(t, g, Stats{Capacity: 2, InFlight: 2})
}

// testOnGrantInLineFIFO mixes callback and channel tickets in one line:
// each kind is granted in its turn, and only in its turn.
func testOnGrantInLineFIFO(t *testing.T, newGate func(int) Gate) {
	g := newGate(1)
	holder := new(Ticket)
	g.Join(holder)
	var l grantLog
	f1, c2, f3, c4 := l.ticket("f1", true), new(Ticket), l.ticket("f3", true), new(Ticket)
	for _, tk := range []*Ticket{f1, c2, f3, c4} {
		g.Join(tk)
	}
	wantGrants(t, l)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 4})
	g.Release(holder)
	wantGrants(t, l, "f1")
	wantReady(t, []*Ticket{c2, c4}, false, false)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 3})
	g.Release(f1)
	wantGrants(t, l, "f1")
	wantReady(t, []*Ticket{c2, c4}, true, false)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 2})
	g.Release(c2)
	wantGrants(t, l, "f1", "f3")
	wantReady(t, []*Ticket{c4}, false)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(f3)
	wantReady(t, []*Ticket{c4}, true)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1})
	g.Release(c4)
	wantGrants(t, l, "f1", "f3") // each f called once
	wantStats(t, g, Stats{Capacity: 1})
}

func testOnGrantDeclinedAtJoin(t *testing.T, newGate func(int) Gate) {
	g := newGate(1)
	var l grantLog
	d := l.ticket("d", false)
	g.Join(d)
	wantGrants(t, l, "d")
	wantStats(t, g, Stats{Capacity: 1})
	g.Release(d) // holds nothing: must not free a slot it never took
	ts := joinAll(g, 2)
	wantReady(t, ts, true, false)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	wantGrants(t, l, "d")
}

// testOnGrantDeclinedPassesSlotOn has tickets in line decline: the slot goes
// to the next in line, and is freed when nobody is left.
func testOnGrantDeclinedPassesSlotOn(t *testing.T, newGate func(int) Gate) {
	g := newGate(1)
	holder := new(Ticket)
	g.Join(holder)
	var l grantLog
	a := l.ticket("a", true)
	for _, tk := range []*Ticket{l.ticket("d1", false), l.ticket("d2", false), a} {
		g.Join(tk)
	}
	c := joinAll(g, 1)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 4})
	g.Release(holder)
	wantGrants(t, l, "d1", "d2", "a")
	wantReady(t, c, false)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(a)
	wantReady(t, c, true)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1})
	// The only one in line declines: the slot is freed, not lost.
	g.Join(l.ticket("d3", false))
	g.Release(c[0])
	wantGrants(t, l, "d1", "d2", "a", "d3")
	wantStats(t, g, Stats{Capacity: 1})
	wantReady(t, joinAll(g, 2), true, false)
}

func testLeaveAfterDecline(t *testing.T, newGate func(int) Gate) {
	g := newGate(1)
	var l grantLog
	atJoin := l.ticket("at join", false)
	g.Join(atJoin)
	if hadSlot := g.Leave(atJoin); hadSlot {
		t.Error("Leave(ticket declined at Join) = true; want false")
	}
	wantStats(t, g, Stats{Capacity: 1})
	holder := new(Ticket)
	g.Join(holder)
	inLine := l.ticket("in line", false)
	g.Join(inLine)
	ts := joinAll(g, 2)
	g.Release(holder) // inLine declines; ts[0] gets the slot
	wantGrants(t, l, "at join", "in line")
	if hadSlot := g.Leave(inLine); hadSlot {
		t.Error("Leave(ticket declined in line) = true; want false")
	}
	wantReady(t, ts, true, false)
	wantStats(t, g, Stats{Capacity: 1, InFlight: 1, Waiting: 1})
	g.Release(ts[0]) // the line is intact: ts[1] is next
	wantReady(t, ts[1:], true)
	g.Release(ts[1])
	wantStats(t, g, Stats{Capacity: 1})
}
