package dispatch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/gate"
)

// goid is the id of the calling goroutine, from its stack header
// ("goroutine 42 [running]:").
func goid() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, err := strconv.ParseUint(strings.Fields(string(buf))[1], 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

// ending is one call of a Start's done: what it said, when, and on which
// goroutine.
type ending struct {
	err  error
	at   time.Duration
	goid uint64
}

// admit calls r.s.Start, which must admit the request; each call of its
// done lands on the returned channel.
func (r *rig) admit(t *testing.T, ctx context.Context, fn memberFunc) <-chan ending {
	t.Helper()
	ends := make(chan ending, 2) // room for a wrong second call, so it shows rather than blocks
	if err := r.s.Start(ctx, nil, fn, func(err error) { ends <- ending{err, r.since(), goid()} }); err != nil {
		t.Fatalf("Start = %v; want it admitted", err)
	}
	return ends
}

// wantEnded checks the first call of done, and that it came on a goroutine
// other than the test's, which called Start.
func wantEnded(t *testing.T, name string, ends <-chan ending, wantErr error, wantAt time.Duration) {
	t.Helper()
	e := <-ends
	if !errors.Is(e.err, wantErr) || e.at != wantAt {
		t.Errorf("%s: done(%v) at %v; want done(%v) at %v", name, e.err, e.at, wantErr, wantAt)
	}
	if e.goid == goid() {
		t.Errorf("%s: done ran on the goroutine that called Start", name)
	}
}

// settle lets every timer the tests arm run out (windows, wave deadlines
// of a minute or less), so that a wrong call of done comes before the test
// ends.
func settle() {
	time.Sleep(2 * time.Minute)
	synctest.Wait()
}

// wantNoMoreEnds settles, then checks that done was not called again.
func wantNoMoreEnds(t *testing.T, name string, ends <-chan ending) {
	t.Helper()
	settle()
	if n := len(ends); n != 0 {
		t.Errorf("%s: done called %d more times; want exactly once", name, n)
	}
}

// refused is a done for a request Start must refuse: it fails the test if
// ever called.
func refused(t *testing.T, name string) func(error) {
	return func(err error) { t.Errorf("%s: done(%v) called for a request Start refused", name, err) }
}

// holdSlot starts a member that holds a slot until release is closed.
func (r *rig) holdSlot(t *testing.T, release <-chan struct{}) <-chan ending {
	return r.admit(t, t.Context(), func(context.Context, *Member) error {
		<-release
		return nil
	})
}

func TestStartRefusalNeverCallsDone(t *testing.T) {
	t.Run("QueueFull", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute, Admission: QueueBound{Max: 1}}, 1)
			release := make(chan struct{})
			holder := r.holdSlot(t, release)
			synctest.Wait() // it holds the slot: no longer queued
			waiter := r.admit(t, t.Context(), sleepFor(time.Second))
			synctest.Wait()
			err := r.s.Start(t.Context(), nil, mustNotRun(t, "shed"), refused(t, "shed"))
			if !errors.Is(err, ErrQueueFull) {
				t.Errorf("Start past MaxQueue = %v; want ErrQueueFull", err)
			}
			if q, n := r.s.Queued(), r.gate.joins.Load(); q != 1 || n != 2 {
				t.Errorf("Queued, gate joins = %d, %d; want 1, 2 (the shed one counts nowhere)", q, n)
			}
			close(release)
			wantEnded(t, "holder", holder, nil, 0)
			wantEnded(t, "waiter", waiter, nil, time.Second)
			settle()
		})
	})

	t.Run("WaitTooLong", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute, Admission: ClientTimeout{}}, 1)
			wantEnded(t, "first", r.admit(t, t.Context(), sleepFor(time.Second)), nil, time.Second)
			release := make(chan struct{})
			holder := r.holdSlot(t, release)
			synctest.Wait()
			// The slot turns over every 1s: a wait of 1s plus 1s of service.
			err := r.s.Start(t.Context(), patient(time.Second), mustNotRun(t, "impatient"), refused(t, "impatient"))
			var tooLong *WaitTooLongError
			if !errors.As(err, &tooLong) {
				t.Errorf("Start(patience 1s) = %v; want a *WaitTooLongError", err)
			}
			if q, n := r.s.Queued(), r.gate.joins.Load(); q != 0 || n != 2 {
				t.Errorf("Queued, gate joins = %d, %d; want 0, 2", q, n)
			}
			close(release)
			wantEnded(t, "holder", holder, nil, time.Second)
			settle()
		})
	})

	t.Run("Closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute}, 1)
			r.s.Close()
			err := r.s.Start(t.Context(), nil, mustNotRun(t, "after Close"), refused(t, "after Close"))
			if !errors.Is(err, ErrClosed) {
				t.Errorf("Start after Close = %v; want ErrClosed", err)
			}
			if q, n := r.s.Queued(), r.gate.joins.Load(); q != 0 || n != 0 {
				t.Errorf("Queued, gate joins = %d, %d; want 0, 0", q, n)
			}
			settle()
		})
	})

	t.Run("CancelledContext", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// MaxSize 1: had it been admitted, its Add would have put it in
			// line at once.
			r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute}, 1)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			err := r.s.Start(ctx, nil, mustNotRun(t, "gone"), refused(t, "gone"))
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Start(cancelled ctx) = %v; want context.Canceled", err)
			}
			if q, n := r.s.Queued(), r.gate.joins.Load(); q != 0 || n != 0 {
				t.Errorf("Queued, gate joins = %d, %d; want 0, 0", q, n)
			}
			settle()
		})
	})
}

func TestStartDoneOnceWhenServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute}, 1)
		errBoom := errors.New("boom")
		ends := r.admit(t, t.Context(), func(context.Context, *Member) error {
			time.Sleep(time.Second)
			return errBoom
		})
		wantEnded(t, "served", ends, errBoom, time.Second)
		wantNoMoreEnds(t, "served", ends)
		wantGate(t, r.gate, 0, 0)
	})
}

// TestStartDoneOnceWhenClientLeavesMidCall has the client leave while fn
// runs: fn's ctx is cancelled, and done hears fn's answer, once; the
// departure does not end the request a second time.
func TestStartDoneOnceWhenClientLeavesMidCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute}, 1)
		errCut := errors.New("upstream call cut short")
		ctx, cancel := context.WithCancel(t.Context())
		ends := r.admit(t, ctx, func(ctx context.Context, _ *Member) error {
			<-ctx.Done()
			return errCut
		})
		time.Sleep(time.Second)
		cancel()
		wantEnded(t, "left mid-call", ends, errCut, time.Second)
		wantNoMoreEnds(t, "left mid-call", ends)
		wantGate(t, r.gate, 0, 0)
	})
}

func TestStartDoneOnceWhenClientLeavesWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 4, MaxWait: 100 * time.Millisecond, Timeout: time.Minute}, 1)
		ctx, cancel := context.WithCancel(t.Context())
		ends := r.admit(t, ctx, mustNotRun(t, "left the window"))
		time.Sleep(50 * time.Millisecond)
		cancel()
		wantEnded(t, "left the window", ends, context.Canceled, 50*time.Millisecond)
		if q, p := r.s.Queued(), r.s.Pending(); q != 0 || p != 0 {
			t.Errorf("Queued, Pending = %d, %d; want 0, 0", q, p)
		}
		wantNoMoreEnds(t, "left the window", ends)
		if n, f := r.gate.joins.Load(), r.flushed(); n != 0 || len(f) != 0 {
			t.Errorf("gate joins %d, flushes %v; want none", n, f)
		}
	})
}

func TestStartDoneOnceWhenClientLeavesLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute}, 1)
		release := make(chan struct{})
		holder := r.holdSlot(t, release)
		ctx, cancel := context.WithCancel(t.Context())
		ends := r.admit(t, ctx, mustNotRun(t, "left the line"))
		synctest.Wait()
		wantGate(t, r.gate, 1, 1)
		time.Sleep(time.Second)
		cancel()
		wantEnded(t, "left the line", ends, context.Canceled, time.Second)
		wantGate(t, r.gate, 1, 0)
		if q := r.s.Queued(); q != 0 {
			t.Errorf("Queued() = %d; want 0", q)
		}
		close(release) // the slot must not reach the departed member
		wantEnded(t, "holder", holder, nil, time.Second)
		wantNoMoreEnds(t, "left the line", ends)
		wantGate(t, r.gate, 0, 0)
	})
}

func TestStartDoneOnceWhenDeadlinePassesInLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		r := newRig(t, Config{MaxSize: 1, Timeout: timeout}, 1)
		holder := r.admit(t, t.Context(), func(ctx context.Context, m *Member) error {
			m.LiftDeadline()
			return sleepFor(5*time.Second)(ctx, m)
		})
		ends := r.admit(t, t.Context(), mustNotRun(t, "stuck in line"))
		wantEnded(t, "stuck in line", ends, ErrDeadline, timeout)
		wantGate(t, r.gate, 1, 0)
		if q := r.s.Queued(); q != 0 {
			t.Errorf("Queued() = %d; want 0", q)
		}
		wantEnded(t, "holder", holder, nil, 5*time.Second)
		wantNoMoreEnds(t, "stuck in line", ends)
		wantGate(t, r.gate, 0, 0)
	})
}

// TestStartWaitersHoldNoGoroutine starts many members behind a held slot:
// while they wait, in line, the goroutine count must not grow with them.
func TestStartWaitersHoldNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const waiters, slack = 200, 2
		r := newRig(t, Config{MaxSize: 10, MaxWait: time.Millisecond, Timeout: time.Minute}, 1)
		release := make(chan struct{})
		holder := r.holdSlot(t, release)
		time.Sleep(time.Millisecond) // its wave flushes; it holds the slot
		synctest.Wait()
		before := runtime.NumGoroutine()
		ends := make([]<-chan ending, waiters)
		for i := range ends {
			ends[i] = r.admit(t, t.Context(), func(context.Context, *Member) error { return nil })
		}
		time.Sleep(time.Millisecond) // the last wave flushes: all are in line
		synctest.Wait()
		wantGate(t, r.gate, 1, waiters)
		if after := runtime.NumGoroutine(); after-before > slack {
			t.Errorf("goroutines went from %d to %d with %d members waiting; want at most %d more",
				before, after, waiters, slack)
		}
		close(release)
		wantEnded(t, "holder", holder, nil, 2*time.Millisecond)
		for i, e := range ends {
			wantEnded(t, fmt.Sprint("waiter ", i), e, nil, 2*time.Millisecond)
		}
		wantGate(t, r.gate, 0, 0)
	})
}

// TestStartReturnsBeforeDone has a member wait for a slot: Start returns at
// once, and done comes later, when the slot does, on another goroutine.
func TestStartReturnsBeforeDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute}, 1)
		release := make(chan struct{})
		time.AfterFunc(time.Second, func() { close(release) })
		holder := r.holdSlot(t, release)
		ends := r.admit(t, t.Context(), func(context.Context, *Member) error { return nil })
		if d := r.since(); d != 0 {
			t.Errorf("Start returned after %v; want at once", d)
		}
		synctest.Wait()
		if len(ends) != 0 {
			t.Error("done called before the member had its slot")
		}
		wantEnded(t, "holder", holder, nil, time.Second)
		wantEnded(t, "waiter", ends, nil, time.Second)
	})
}

// stallingGate is a static gate that calls beforeJoin ahead of each Join,
// outside the gate's lock: a test can act while a wave's flush is under way.
type stallingGate struct {
	*gate.Local
	beforeJoin func()
}

func (g *stallingGate) Join(t *gate.Ticket) {
	g.beforeJoin()
	g.Local.Join(t)
}

// TestStartDepartedMemberDeclinesLateGrant has a slot reach a member whose
// client has left, but which is not yet out of line (its departure waits
// for its wave's flush to finish). The member must decline the slot, which
// passes on, and end once with ctx's error, fn never run.
func TestStartDepartedMemberDeclinesLateGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, err := gate.New(gate.Fixed(1), nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		release := make(chan struct{})
		joins := 0
		g := &stallingGate{Local: st, beforeJoin: func() {
			if joins++; joins != 3 {
				return
			}
			// b is joining: a is in line, and the flush not done.
			cancel() // a's departure claims it, then waits for the flush
			synctest.Wait()
			close(release) // the holder's slot is offered to a
			synctest.Wait()
			if got := st.Stats(); got.InFlight != 0 || got.Waiting != 0 {
				t.Errorf("gate after a's late grant = %+v; want the slot declined and freed", got)
			}
		}}
		r := &rig{start: time.Now()}
		r.s, err = New(Config{MaxSize: 2, MaxWait: time.Hour, Timeout: time.Minute}, g, Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		defer r.s.Close()
		holder := r.holdSlot(t, release)
		r.s.Flush()
		a := r.admit(t, ctx, mustNotRun(t, "departed member"))
		b := r.admit(t, t.Context(), sleepFor(time.Second)) // fills wave 2: flushes
		wantEnded(t, "holder", holder, nil, 0)
		wantEnded(t, "departed member", a, context.Canceled, 0)
		wantEnded(t, "b", b, nil, time.Second)
		wantNoMoreEnds(t, "departed member", a)
		wantGate(t, st, 0, 0)
		if q := r.s.Queued(); q != 0 {
			t.Errorf("Queued() = %d; want 0", q)
		}
	})
}
