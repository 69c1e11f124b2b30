package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/window"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingGate is a static gate that counts the tickets put in line, so a
// test can tell that a member never reached the gate at all.
type countingGate struct {
	*gate.Local
	joins atomic.Int64

	mu   sync.Mutex
	ends []gate.Ending // how each slot's use ended, as the gate heard it
}

func (g *countingGate) Release(t *gate.Ticket, o gate.Outcome) {
	g.mu.Lock()
	g.ends = append(g.ends, o.End)
	g.mu.Unlock()
	g.Local.Release(t, o)
}

// ended is how each slot's use ended, in the order the slots came back.
func (g *countingGate) ended() []gate.Ending {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.ends)
}

func (g *countingGate) Join(t *gate.Ticket) {
	g.joins.Add(1)
	g.Local.Join(t)
}

// flushEvent is one call of the Flushed hook.
type flushEvent struct {
	id     uint64
	size   int
	reason window.Reason
	at     time.Duration // since the rig was built
}

// rig is a scheduler under test with its gate and a record of its flushes.
// Build it inside a synctest bubble: times are virtual and exact.
type rig struct {
	s     *Scheduler
	gate  *countingGate
	start time.Time

	mu      sync.Mutex
	flushes []flushEvent
}

func newRig(t *testing.T, cfg Config, capacity int) *rig {
	t.Helper()
	st, err := gate.New(gate.Fixed(capacity), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{gate: &countingGate{Local: st}, start: time.Now()}
	r.s, err = New(cfg, r.gate, Hooks{Flushed: func(id uint64, size int, reason window.Reason) {
		r.mu.Lock()
		r.flushes = append(r.flushes, flushEvent{id, size, reason, r.since()})
		r.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.s.Close)
	return r
}

func (r *rig) since() time.Duration { return time.Since(r.start) }

func (r *rig) flushed() []flushEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.flushes)
}

// outcome is what one Do returned, and when.
type outcome struct {
	err error
	at  time.Duration
}

type memberFunc = func(context.Context, *Member) error

// do runs s.Do in a new goroutine; the outcome arrives on the channel.
func (r *rig) do(ctx context.Context, fn memberFunc) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		err := r.s.Do(ctx, nil, fn)
		out <- outcome{err, r.since()}
	}()
	return out
}

// arrive is do, then waits until the member is in line, so that members
// arrive in the order arrive is called even at the same virtual instant.
func (r *rig) arrive(ctx context.Context, fn memberFunc) <-chan outcome {
	out := r.do(ctx, fn)
	synctest.Wait()
	return out
}

func wantOutcome(t *testing.T, name string, ch <-chan outcome, wantErr error, wantAt time.Duration) {
	t.Helper()
	o := <-ch
	if !errors.Is(o.err, wantErr) || o.at != wantAt {
		t.Errorf("%s: Do = %v at %v; want %v at %v", name, o.err, o.at, wantErr, wantAt)
	}
}

func wantGate(t *testing.T, g gate.Gate, inFlight, waiting int) {
	t.Helper()
	if st := g.Stats(); st.InFlight != inFlight || st.Waiting != waiting {
		t.Errorf("gate in flight %d, waiting %d; want %d, %d", st.InFlight, st.Waiting, inFlight, waiting)
	}
}

// sleepFor is a member function that takes d, or less if its ctx ends.
func sleepFor(d time.Duration) memberFunc {
	return func(ctx context.Context, _ *Member) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return fmt.Errorf("upstream call: %w", ctx.Err())
		}
	}
}

// blockUntilCancelled is a member function that only ends with its ctx.
func blockUntilCancelled(ctx context.Context, _ *Member) error {
	<-ctx.Done()
	return fmt.Errorf("upstream call: %w", ctx.Err())
}

// patient describes a request whose client waits d in all.
func patient(d time.Duration) *request.Descriptor { return &request.Descriptor{Patience: d} }

// mustNotRun is a member function that fails the test if it is ever called.
func mustNotRun(t *testing.T, name string) memberFunc {
	return func(context.Context, *Member) error {
		t.Errorf("%s: fn was called", name)
		return nil
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	g, err := gate.New(gate.Fixed(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	good := Config{MaxSize: 16, MaxWait: 20 * time.Millisecond, Timeout: time.Minute}
	for _, tc := range []struct {
		name string
		cfg  Config
		g    gate.Gate
	}{
		{"zero timeout", Config{MaxSize: 16, MaxWait: time.Millisecond}, g},
		{"zero max size", Config{MaxWait: time.Millisecond, Timeout: time.Minute}, g},
		{"negative max wait", Config{MaxSize: 16, MaxWait: -1, Timeout: time.Minute}, g},
		{"nil gate", good, nil},
	} {
		if s, err := New(tc.cfg, tc.g, Hooks{}); err == nil || s != nil {
			t.Errorf("%s: New = %v, %v; want nil and an error", tc.name, s, err)
		}
	}
}

func TestCapNeverExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const capacity, burst = 4, 40
		r := newRig(t, Config{MaxSize: 16, MaxWait: 5 * time.Millisecond, Timeout: time.Minute}, capacity)
		var (
			mu             sync.Mutex
			inFlight, peak int
		)
		fn := func(ctx context.Context, m *Member) error {
			mu.Lock()
			inFlight++
			peak = max(peak, inFlight)
			mu.Unlock()
			defer func() {
				mu.Lock()
				inFlight--
				mu.Unlock()
			}()
			return sleepFor(100*time.Millisecond)(ctx, m)
		}
		outs := make([]<-chan outcome, burst)
		for i := range outs {
			outs[i] = r.do(t.Context(), fn)
		}
		for i, out := range outs {
			if o := <-out; o.err != nil {
				t.Errorf("member %d: %v", i, o.err)
			}
		}
		if peak != capacity {
			t.Errorf("peak in flight = %d; want the cap, %d", peak, capacity)
		}
		wantGate(t, r.gate, 0, 0)
		if n := r.s.Queued(); n != 0 {
			t.Errorf("Queued() = %d; want 0", n)
		}
	})
}

func TestSlotsInArrivalOrderAcrossWaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 10 * time.Millisecond
		r := newRig(t, Config{MaxSize: 3, MaxWait: maxWait, Timeout: time.Minute}, 1)
		var (
			mu    sync.Mutex
			order []int
		)
		member := func(i int) memberFunc {
			return func(ctx context.Context, m *Member) error {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				return sleepFor(7*time.Millisecond)(ctx, m)
			}
		}
		// Arrival schedule (ms): 0 0 0 | 0 0 | 12 12 12 | 13 | 30 30
		var outs []<-chan outcome
		arriveAt := func(at time.Duration, n int) {
			time.Sleep(at - r.since())
			for range n {
				outs = append(outs, r.arrive(t.Context(), member(len(outs))))
			}
		}
		arriveAt(0, 5)
		arriveAt(12*time.Millisecond, 3)
		arriveAt(13*time.Millisecond, 1)
		arriveAt(30*time.Millisecond, 2)
		for i, out := range outs {
			if o := <-out; o.err != nil {
				t.Errorf("member %d: %v", i, o.err)
			}
		}
		for i, got := range order {
			if got != i {
				t.Fatalf("fn started in order %v; want arrival order 0..%d", order, len(outs)-1)
			}
		}
		want := []flushEvent{
			{1, 3, window.ReasonSize, 0},
			{2, 2, window.ReasonAge, maxWait},
			{3, 3, window.ReasonSize, 12 * time.Millisecond},
			{4, 1, window.ReasonAge, 23 * time.Millisecond},
			{5, 2, window.ReasonAge, 40 * time.Millisecond},
		}
		if got := r.flushed(); !slices.Equal(got, want) {
			t.Errorf("flushes = %v; want %v", got, want)
		}
	})
}

func TestDeadlineCoversSlotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait, timeout = 10 * time.Millisecond, time.Second
		r := newRig(t, Config{MaxSize: 3, MaxWait: maxWait, Timeout: timeout}, 1)
		// The holder lifts its deadline and keeps the only slot for 5s.
		holder := r.arrive(t.Context(), func(ctx context.Context, m *Member) error {
			m.LiftDeadline()
			return sleepFor(5*time.Second)(ctx, m)
		})
		time.Sleep(20 * time.Millisecond) // wave 1 flushed at 10ms; holder runs
		var stuck []<-chan outcome
		for i := range 3 { // wave 2: flushed at 20ms, full
			stuck = append(stuck, r.arrive(t.Context(), mustNotRun(t, fmt.Sprint("stuck member ", i))))
		}
		for i, out := range stuck {
			wantOutcome(t, fmt.Sprint("stuck member ", i), out, ErrDeadline, 20*time.Millisecond+timeout)
		}
		wantGate(t, r.gate, 1, 0)
		if n := r.s.Queued(); n != 0 {
			t.Errorf("Queued() = %d; want 0", n)
		}
		wantOutcome(t, "holder", holder, nil, maxWait+5*time.Second)
		wantGate(t, r.gate, 0, 0)
	})
}

// TestSlotAfterDeadline has a member find its slot free only once its
// deadline has passed: a Flushed hook stalls the flush past Timeout, as a GC
// pause or a starved CPU might. Slot and deadline are then both in when the
// member looks; it must get ErrDeadline, and fn must not be called.
func TestSlotAfterDeadline(t *testing.T) {
	for range 20 { // a select between two ready cases is a coin flip: repeat
		synctest.Test(t, func(t *testing.T) {
			const timeout = time.Second
			st, err := gate.New(gate.Fixed(1), nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(Config{MaxSize: 1, Timeout: timeout}, st, Hooks{
				Flushed: func(uint64, int, window.Reason) { time.Sleep(timeout + time.Millisecond) },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Do(t.Context(), nil, mustNotRun(t, "late member")); !errors.Is(err, ErrDeadline) {
				t.Errorf("Do = %v; want ErrDeadline", err)
			}
			wantGate(t, st, 0, 0)
		})
	}
}

func TestOverrunCancelsFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 2 * time.Second
		r := newRig(t, Config{MaxSize: 1, Timeout: timeout}, 1)
		var cause error
		out := r.arrive(t.Context(), func(ctx context.Context, m *Member) error {
			if want := r.start.Add(timeout); !m.Deadline().Equal(want) {
				t.Errorf("Deadline() = %v; want %v", m.Deadline(), want)
			}
			err := blockUntilCancelled(ctx, m)
			cause = context.Cause(ctx)
			return err
		})
		wantOutcome(t, "overrun", out, ErrDeadline, timeout)
		if cause != ErrDeadline {
			t.Errorf("fn's ctx cause = %v; want ErrDeadline", cause)
		}
		wantGate(t, r.gate, 0, 0)
	})
}

func TestLiftDeadline(t *testing.T) {
	const timeout = time.Second
	cfg := Config{MaxSize: 1, Timeout: timeout}

	t.Run("RunsPastDeadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, cfg, 1)
			out := r.arrive(t.Context(), func(ctx context.Context, m *Member) error {
				time.Sleep(timeout / 2) // the response headers are in
				if !m.LiftDeadline() {
					t.Error("LiftDeadline before the deadline = false; want true")
				}
				return sleepFor(3*time.Second)(ctx, m) // the stream goes on
			})
			wantOutcome(t, "lifted", out, nil, timeout/2+3*time.Second)
		})
	})

	t.Run("TooLate", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, cfg, 1)
			out := r.arrive(t.Context(), func(ctx context.Context, m *Member) error {
				time.Sleep(timeout + time.Millisecond) // deaf to ctx
				if m.LiftDeadline() {
					t.Error("LiftDeadline after the deadline = true; want false")
				}
				return ctx.Err()
			})
			wantOutcome(t, "lifted too late", out, ErrDeadline, timeout+time.Millisecond)
		})
	})

	t.Run("CallerStillGoverns", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, cfg, 1)
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			out := r.arrive(ctx, func(ctx context.Context, m *Member) error {
				m.LiftDeadline()
				return blockUntilCancelled(ctx, m)
			})
			wantOutcome(t, "lifted, caller leaves", out, context.DeadlineExceeded, 3*time.Second)
			wantGate(t, r.gate, 0, 0)
		})
	})
}

func TestMemberFailuresAreIsolated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		r := newRig(t, Config{MaxSize: 5, MaxWait: time.Hour, Timeout: timeout}, 5)
		errBoom := errors.New("boom")
		failing := r.arrive(t.Context(), func(context.Context, *Member) error {
			time.Sleep(100 * time.Millisecond)
			return errBoom
		})
		panicking := r.arrive(t.Context(), func(context.Context, *Member) error {
			time.Sleep(200 * time.Millisecond)
			panic("kaboom")
		})
		overrunning := r.arrive(t.Context(), blockUntilCancelled)
		fine := r.arrive(t.Context(), sleepFor(300*time.Millisecond))
		slowButFine := r.arrive(t.Context(), func(ctx context.Context, m *Member) error {
			m.LiftDeadline()
			return sleepFor(2*timeout)(ctx, m)
		})

		wantOutcome(t, "failing", failing, errBoom, 100*time.Millisecond)
		o := <-panicking
		var pe *PanicError
		if !errors.As(o.err, &pe) || pe.Value != "kaboom" || len(pe.Stack) == 0 || o.at != 200*time.Millisecond {
			t.Errorf("panicking: Do = %v at %v; want *PanicError{kaboom} with a stack at 200ms", o.err, o.at)
		}
		wantOutcome(t, "fine", fine, nil, 300*time.Millisecond)
		wantOutcome(t, "overrunning", overrunning, ErrDeadline, timeout)
		wantOutcome(t, "slow but lifted", slowButFine, nil, 2*timeout)
		wantGate(t, r.gate, 0, 0)
	})
}

func TestCancelledBeforeFlush(t *testing.T) {
	t.Run("LeavesItsWave", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const maxWait = 100 * time.Millisecond
			r := newRig(t, Config{MaxSize: 4, MaxWait: maxWait, Timeout: time.Minute}, 1)
			ctx, cancel := context.WithCancel(t.Context())
			gone := r.arrive(ctx, mustNotRun(t, "departed member"))
			b := r.arrive(t.Context(), sleepFor(10*time.Millisecond))
			c := r.arrive(t.Context(), sleepFor(10*time.Millisecond))
			time.Sleep(50 * time.Millisecond)
			cancel()
			wantOutcome(t, "departed member", gone, context.Canceled, 50*time.Millisecond)
			if n, q := r.s.Pending(), r.s.Queued(); n != 2 || q != 2 {
				t.Errorf("Pending, Queued = %d, %d; want 2, 2", n, q)
			}
			wantOutcome(t, "b", b, nil, maxWait+10*time.Millisecond)
			wantOutcome(t, "c", c, nil, maxWait+20*time.Millisecond)
			if got, want := r.flushed(), []flushEvent{{1, 2, window.ReasonAge, maxWait}}; !slices.Equal(got, want) {
				t.Errorf("flushes = %v; want %v", got, want)
			}
			if n := r.gate.joins.Load(); n != 2 {
				t.Errorf("gate saw %d tickets; want 2 (the departed member never reaches it)", n)
			}
		})
	})

	t.Run("EmptiedWaveNeverFlushes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t, Config{MaxSize: 4, MaxWait: 100 * time.Millisecond, Timeout: time.Minute}, 1)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
			defer cancel()
			gone := r.arrive(ctx, mustNotRun(t, "departed member"))
			wantOutcome(t, "departed member", gone, context.DeadlineExceeded, 30*time.Millisecond)
			time.Sleep(time.Second)
			if got := r.flushed(); len(got) != 0 {
				t.Errorf("flushes = %v; want none", got)
			}
			if n := r.gate.joins.Load(); n != 0 {
				t.Errorf("gate saw %d tickets; want 0", n)
			}
			if n := r.s.Queued(); n != 0 {
				t.Errorf("Queued() = %d; want 0", n)
			}
		})
	})

	t.Run("BeforeDo", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// MaxSize 1: had the member entered the window, its Add would
			// have flushed a wave and put it in line at once.
			r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute}, 1)
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if err := r.s.Do(ctx, nil, mustNotRun(t, "member gone before Do")); !errors.Is(err, context.Canceled) {
				t.Errorf("Do(cancelled ctx) = %v; want context.Canceled", err)
			}
			if n := r.gate.joins.Load(); n != 0 {
				t.Errorf("gate saw %d tickets; want 0", n)
			}
			if got := r.flushed(); len(got) != 0 {
				t.Errorf("flushes = %v; want none", got)
			}
		})
	})
}

func TestDepartWhileWaitingForSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute}, 1)
		holder := r.arrive(t.Context(), sleepFor(time.Second))
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		gone := r.arrive(ctx, mustNotRun(t, "departed member"))
		next := r.arrive(t.Context(), sleepFor(time.Second))
		wantGate(t, r.gate, 1, 2)
		wantOutcome(t, "departed member", gone, context.DeadlineExceeded, 100*time.Millisecond)
		wantGate(t, r.gate, 1, 1)
		wantOutcome(t, "holder", holder, nil, time.Second)
		wantOutcome(t, "next", next, nil, 2*time.Second)
		wantGate(t, r.gate, 0, 0)
		if n := r.s.Queued(); n != 0 {
			t.Errorf("Queued() = %d; want 0", n)
		}
	})
}

func TestMembersAnswerIndependently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 2, MaxWait: time.Hour, Timeout: time.Minute}, 2)
		var waves [2]uint64
		member := func(i int, d time.Duration) memberFunc {
			return func(ctx context.Context, m *Member) error {
				waves[i] = m.WaveID()
				return sleepFor(d)(ctx, m)
			}
		}
		slow := r.arrive(t.Context(), member(0, 5*time.Second))
		fast := r.arrive(t.Context(), member(1, 100*time.Millisecond))
		wantOutcome(t, "fast", fast, nil, 100*time.Millisecond)
		wantOutcome(t, "slow", slow, nil, 5*time.Second)
		if waves[0] != 1 || waves[1] != 1 {
			t.Errorf("wave ids = %v; want both in wave 1", waves)
		}
	})
}

func TestFlushedHookReasons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 20 * time.Millisecond
		r := newRig(t, Config{MaxSize: 3, MaxWait: maxWait, Timeout: time.Minute}, 8)
		var (
			mu      sync.Mutex
			reasons []window.Reason
		)
		fn := func(_ context.Context, m *Member) error {
			mu.Lock()
			reasons = append(reasons, m.FlushReason())
			mu.Unlock()
			return nil
		}
		var outs []<-chan outcome
		for range 4 { // one full wave, one left to age out
			outs = append(outs, r.arrive(t.Context(), fn))
		}
		time.Sleep(50 * time.Millisecond)
		for range 2 {
			outs = append(outs, r.arrive(t.Context(), fn))
		}
		r.s.Flush()
		for i, out := range outs {
			if o := <-out; o.err != nil {
				t.Errorf("member %d: %v", i, o.err)
			}
		}
		want := []flushEvent{
			{1, 3, window.ReasonSize, 0},
			{2, 1, window.ReasonAge, maxWait},
			{3, 2, window.ReasonFlush, 50 * time.Millisecond},
		}
		if got := r.flushed(); !slices.Equal(got, want) {
			t.Errorf("flushes = %v; want %v", got, want)
		}
		wantReasons := []window.Reason{window.ReasonSize, window.ReasonSize, window.ReasonSize,
			window.ReasonAge, window.ReasonFlush, window.ReasonFlush}
		if !slices.Equal(reasons, wantReasons) {
			t.Errorf("members saw reasons %v; want %v", reasons, wantReasons)
		}
	})
}

func TestQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 5, MaxWait: 10 * time.Millisecond, Timeout: time.Minute}, 1)
		release := make(chan struct{})
		holder := r.arrive(t.Context(), func(context.Context, *Member) error {
			<-release
			return nil
		})
		time.Sleep(10 * time.Millisecond) // holder's wave flushes; it runs
		synctest.Wait()
		wantQueued := func(queued, pending int) {
			t.Helper()
			if q, p := r.s.Queued(), r.s.Pending(); q != queued || p != pending {
				t.Errorf("Queued, Pending = %d, %d; want %d, %d", q, p, queued, pending)
			}
		}
		wantQueued(0, 0)
		var outs []<-chan outcome
		for range 3 {
			outs = append(outs, r.arrive(t.Context(), sleepFor(time.Millisecond)))
		}
		wantQueued(3, 3) // in the window
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		wantQueued(3, 0) // waiting for the slot
		close(release)
		wantOutcome(t, "holder", holder, nil, 20*time.Millisecond)
		for i, out := range outs {
			wantOutcome(t, fmt.Sprint("member ", i), out, nil, time.Duration(21+i)*time.Millisecond)
		}
		wantQueued(0, 0)
	})
}

func TestCloseFlushesAndRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 5, MaxWait: time.Hour, Timeout: time.Minute}, 2)
		a := r.arrive(t.Context(), sleepFor(time.Millisecond))
		b := r.arrive(t.Context(), sleepFor(time.Millisecond))
		r.s.Close()
		wantOutcome(t, "a", a, nil, time.Millisecond)
		wantOutcome(t, "b", b, nil, time.Millisecond)
		if err := r.s.Do(t.Context(), nil, mustNotRun(t, "member after Close")); !errors.Is(err, ErrClosed) {
			t.Errorf("Do after Close = %v; want ErrClosed", err)
		}
		if got, want := r.flushed(), []flushEvent{{1, 2, window.ReasonFlush, 0}}; !slices.Equal(got, want) {
			t.Errorf("flushes = %v; want %v", got, want)
		}
	})
}

func TestMemberReportsItsPassage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait, timeout = 50 * time.Millisecond, time.Minute
		r := newRig(t, Config{MaxSize: 2, MaxWait: maxWait, Timeout: timeout}, 1)
		type passage struct {
			wave      uint64
			queueWait time.Duration
			deadline  time.Duration // since the rig was built
		}
		got := make([]passage, 3)
		member := func(i int) memberFunc {
			return func(ctx context.Context, m *Member) error {
				got[i] = passage{m.WaveID(), m.QueueWait(), m.Deadline().Sub(r.start)}
				return sleepFor(300*time.Millisecond)(ctx, m)
			}
		}
		outs := []<-chan outcome{r.arrive(t.Context(), member(0)), r.arrive(t.Context(), member(1))}
		time.Sleep(10 * time.Millisecond)
		outs = append(outs, r.arrive(t.Context(), member(2))) // alone: flushed at 60ms
		for i, out := range outs {
			if o := <-out; o.err != nil {
				t.Errorf("member %d: %v", i, o.err)
			}
		}
		want := []passage{
			{1, 0, timeout},
			{1, 300 * time.Millisecond, timeout},
			{2, 590 * time.Millisecond, 60*time.Millisecond + timeout}, // granted at 600ms
		}
		if !slices.Equal(got, want) {
			t.Errorf("passages = %+v; want %+v", got, want)
		}
	})
}

// TestDeadlineUnderLoad runs many members, some lifting their deadline, with
// durations on both sides of it, and checks each outcome against what its fn
// saw: the cap holds, a member that ends in time or lifted in time succeeds,
// any other gets ErrDeadline exactly at its deadline.
func TestDeadlineUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			capacity = 8
			members  = 200
			timeout  = 100 * time.Millisecond
		)
		r := newRig(t, Config{MaxSize: 16, MaxWait: 5 * time.Millisecond, Timeout: timeout}, capacity)
		type seen struct {
			started        bool
			start          time.Duration
			deadline       time.Duration
			lifted, wanted bool
		}
		var (
			mu             sync.Mutex
			inFlight, peak int
		)
		seens := make([]seen, members)
		// Durations are whole milliseconds plus 1µs, and lifts come 250µs
		// in, so that nothing ends exactly at a deadline (a whole ms).
		dur := func(i int) time.Duration { return time.Duration(i*37%150)*time.Millisecond + time.Microsecond }
		const liftAfter = 250 * time.Microsecond
		end := func(i int, s seen) time.Duration {
			if s.wanted {
				return s.start + liftAfter + dur(i)
			}
			return s.start + dur(i)
		}
		member := func(i int) memberFunc {
			return func(ctx context.Context, m *Member) error {
				mu.Lock()
				inFlight++
				peak = max(peak, inFlight)
				mu.Unlock()
				defer func() {
					mu.Lock()
					inFlight--
					mu.Unlock()
				}()
				s := seen{started: true, start: r.since(), deadline: m.Deadline().Sub(r.start), wanted: i%4 == 0}
				defer func() { seens[i] = s }()
				if s.wanted {
					time.Sleep(liftAfter)
					s.lifted = m.LiftDeadline()
					return sleepFor(dur(i))(ctx, m)
				}
				return sleepFor(dur(i))(ctx, m)
			}
		}
		outs := make([]<-chan outcome, members)
		for i := range outs {
			if i%10 == 0 {
				time.Sleep(time.Duration(i%7) * time.Millisecond)
			}
			outs[i] = r.do(t.Context(), member(i))
		}
		var cases [4]int // never ran, ended in time, lifted, overran
		for i, out := range outs {
			o, s := <-out, seens[i]
			switch {
			case !s.started:
				cases[0]++
				if !errors.Is(o.err, ErrDeadline) {
					t.Errorf("member %d never ran: Do = %v; want ErrDeadline", i, o.err)
				}
			case s.lifted || end(i, s) < s.deadline:
				cases[1+btoi(s.lifted)]++
				if o.err != nil || o.at != end(i, s) {
					t.Errorf("member %d (lifted %v): Do = %v at %v; want nil at %v", i, s.lifted, o.err, o.at, end(i, s))
				}
			default:
				cases[3]++
				if !errors.Is(o.err, ErrDeadline) || o.at != s.deadline {
					t.Errorf("member %d: Do = %v at %v; want ErrDeadline at %v", i, o.err, o.at, s.deadline)
				}
			}
		}
		if slices.Contains(cases[:], 0) {
			t.Errorf("cases (never ran, in time, lifted, overran) = %v; the load must reach each", cases)
		}
		if peak != capacity {
			t.Errorf("peak in flight = %d; want %d", peak, capacity)
		}
		wantGate(t, r.gate, 0, 0)
		if n := r.s.Queued(); n != 0 {
			t.Errorf("Queued() = %d; want 0", n)
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
