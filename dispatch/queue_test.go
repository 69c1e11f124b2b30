package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/gate"
)

func newTestScheduler(t *testing.T, cfg Config, slots int) (*Scheduler, *gate.Local) {
	t.Helper()
	g, err := gate.New(gate.Fixed(slots), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg, g, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, g
}

func TestQueueFullShedsAtOnceAndCountsEveryWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, g := newTestScheduler(t, Config{MaxSize: 1, Timeout: time.Minute, Admission: QueueBound{Max: 2}}, 1)
		release := make(chan struct{})
		hold := func(context.Context, *Member) error { <-release; return nil }
		errs := make(chan error, 3)
		for range 3 { // one in flight, two waiting for the slot: the queue is full
			go func() { errs <- s.Do(context.Background(), nil, hold) }()
			// One at a time: three arriving together would briefly count three
			// waiting before the first is granted, and the third would be shed.
			synctest.Wait()
		}
		if q := s.Queued(); q != 2 || !s.Full() {
			t.Fatalf("queued = %d, full = %v, gate %+v, pending %d; want 2, true", q, s.Full(), g.Stats(), s.Pending())
		}
		start := time.Now()
		err := s.Do(context.Background(), nil, hold)
		if !errors.Is(err, ErrQueueFull) {
			t.Fatalf("Do past the cap = %v; want ErrQueueFull", err)
		}
		if time.Since(start) != 0 {
			t.Errorf("shed after %v; want at once", time.Since(start))
		}
		close(release)
		for range 3 {
			if err := <-errs; err != nil {
				t.Errorf("a queued member failed: %v", err)
			}
		}
		if st := g.Stats(); st.InFlight != 0 || st.Waiting != 0 || s.Queued() != 0 {
			t.Fatalf("after: gate %+v, queued %d; want all empty", st, s.Queued())
		}
		// Room again: the next one is served.
		if err := s.Do(context.Background(), nil, func(context.Context, *Member) error { return nil }); err != nil {
			t.Fatalf("after the queue drained: %v", err)
		}
	})
}

func TestQueueCapCountsMembersInOpenWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := newTestScheduler(t, Config{MaxSize: 10, MaxWait: time.Second, Timeout: time.Minute, Admission: QueueBound{Max: 3}}, 8)
		errs := make(chan error, 3)
		for range 3 {
			go func() { errs <- s.Do(context.Background(), nil, func(context.Context, *Member) error { return nil }) }()
		}
		synctest.Wait()
		if p := s.Pending(); p != 3 {
			t.Fatalf("pending = %d; want 3 in the open window", p)
		}
		if err := s.Do(context.Background(), nil, nil); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("fourth = %v; want ErrQueueFull while three sit in the window", err)
		}
		for range 3 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

func TestRequeueGivesSlotBackDuringBackoffAndRejoinsAtBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, g := newTestScheduler(t, Config{MaxSize: 1, Timeout: time.Minute}, 1)
		var order []string
		retried := make(chan struct{})
		go func() {
			s.Do(context.Background(), nil, func(ctx context.Context, m *Member) error {
				order = append(order, "a1")
				if err := m.Requeue(ctx, 2*time.Second); err != nil {
					return err
				}
				order = append(order, "a2")
				close(retried)
				return nil
			})
		}()
		synctest.Wait()
		if st := g.Stats(); st.InFlight != 0 {
			t.Fatalf("gate during backoff = %+v; want the slot given back", st)
		}
		done := make(chan struct{})
		go func() { // b arrives during a's backoff and runs on the free slot for 5 s
			s.Do(context.Background(), nil, func(context.Context, *Member) error {
				order = append(order, "b")
				time.Sleep(5 * time.Second)
				return nil
			})
			close(done)
		}()
		<-retried
		<-done
		if got := fmt.Sprint(order); got != "[a1 b a2]" {
			t.Fatalf("order = %s; want the retry behind b, which arrived during the backoff", got)
		}
	})
}

func TestRequeueRespectsTheWaveDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, g := newTestScheduler(t, Config{MaxSize: 1, Timeout: 3 * time.Second}, 1)
		start := time.Now()
		err := s.Do(context.Background(), nil, func(ctx context.Context, m *Member) error {
			return m.Requeue(ctx, time.Hour)
		})
		if !errors.Is(err, ErrDeadline) || time.Since(start) != 3*time.Second {
			t.Fatalf("Do = %v after %v; want ErrDeadline at 3s", err, time.Since(start))
		}
		if st := g.Stats(); st.InFlight != 0 || st.Waiting != 0 {
			t.Fatalf("gate = %+v; want empty", st)
		}
	})
}

// TestQueueBoundExactUnderConcurrentArrivals has many requests arrive at
// once behind a held slot: exactly the cap is admitted, the rest shed.
func TestQueueBoundExactUnderConcurrentArrivals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const max, arrivals = 5, 50
		r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute, Admission: QueueBound{Max: max}}, 1)
		release := make(chan struct{})
		holder := r.holdSlot(t, release)
		synctest.Wait()
		var admitted, shed atomic.Int64
		var wg sync.WaitGroup
		for range arrivals {
			wg.Go(func() {
				err := r.s.Start(t.Context(), nil, func(context.Context, *Member) error { return nil }, func(error) {})
				switch {
				case err == nil:
					admitted.Add(1)
				case errors.Is(err, ErrQueueFull):
					shed.Add(1)
				default:
					t.Errorf("Start = %v; want nil or ErrQueueFull", err)
				}
			})
		}
		wg.Wait()
		if a, s := admitted.Load(), shed.Load(); a != max || s != arrivals-max {
			t.Errorf("admitted %d, shed %d; want %d, %d", a, s, max, arrivals-max)
		}
		if !r.s.Full() {
			t.Error("Full() = false with the queue at its cap")
		}
		close(release)
		wantEnded(t, "holder", holder, nil, 0)
		settle()
		if r.s.Full() || r.s.Queued() != 0 {
			t.Errorf("after: Full %v, Queued %d; want false, 0", r.s.Full(), r.s.Queued())
		}
	})
}
