package dispatch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/window"
)

// heldReleaser keeps each wave's join for the test to call later.
type heldReleaser struct {
	mu    sync.Mutex
	waves []*window.Wave[*Member]
	join  func(*Member)
}

func (h *heldReleaser) Release(w *window.Wave[*Member], join func(*Member)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waves, h.join = append(h.waves, w), join
}

// members returns the members of the waves released so far, and join.
func (h *heldReleaser) members() ([]*Member, func(*Member)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var ms []*Member
	for _, w := range h.waves {
		ms = append(ms, w.Items...)
	}
	return ms, h.join
}

func newHeldRig(t *testing.T, cfg Config, capacity int) (*rig, *heldReleaser) {
	t.Helper()
	h := &heldReleaser{}
	cfg.Releaser = h
	st, err := gate.New(gate.Fixed(capacity), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{gate: &countingGate{Local: st}, start: time.Now()}
	r.s, err = New(cfg, r.gate, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.s.Close)
	return r, h
}

// TestReleaserJoinsLater has a releaser hold a wave and join its members
// one by one, in its own order: none is in line before its join, and each
// is served in join order.
func TestReleaserJoinsLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, h := newHeldRig(t, Config{MaxSize: 3, Timeout: time.Minute}, 1)
		var order []int
		member := func(i int) memberFunc {
			return func(ctx context.Context, m *Member) error {
				order = append(order, i)
				return sleepFor(time.Second)(ctx, m)
			}
		}
		outs := []<-chan outcome{r.arrive(t.Context(), member(0)), r.arrive(t.Context(), member(1)), r.arrive(t.Context(), member(2))}
		ms, join := h.members()
		if len(ms) != 3 || r.gate.joins.Load() != 0 || r.s.Queued() != 3 {
			t.Fatalf("wave of %d, gate joins %d, queued %d; want 3 released, none in line, 3 queued", len(ms), r.gate.joins.Load(), r.s.Queued())
		}
		join(ms[2])
		join(ms[2]) // a second join of one member does nothing
		time.Sleep(500 * time.Millisecond)
		join(ms[0])
		join(ms[1])
		wantOutcome(t, "third", outs[2], nil, time.Second)
		wantOutcome(t, "first", outs[0], nil, 2*time.Second)
		wantOutcome(t, "second", outs[1], nil, 3*time.Second)
		if n := r.gate.joins.Load(); n != 3 {
			t.Errorf("gate joins = %d; want 3, one a member", n)
		}
		if len(order) != 3 || order[0] != 2 || order[1] != 0 || order[2] != 1 {
			t.Errorf("served in order %v; want the join order [2 0 1]", order)
		}
	})
}

// TestReleasedMemberLeavesBeforeJoin has members of a held wave leave
// before their join: a client that leaves, and a wave deadline that
// passes. Each ends at once with its reason and never reaches the gate,
// even when joined afterwards.
func TestReleasedMemberLeavesBeforeJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		r, h := newHeldRig(t, Config{MaxSize: 2, Timeout: timeout}, 1)
		ctx, cancel := context.WithCancel(t.Context())
		gone := r.arrive(ctx, mustNotRun(t, "departed member"))
		late := r.arrive(t.Context(), mustNotRun(t, "member past its deadline"))
		time.Sleep(100 * time.Millisecond)
		cancel()
		wantOutcome(t, "departed member", gone, context.Canceled, 100*time.Millisecond)
		wantOutcome(t, "member past its deadline", late, ErrDeadline, timeout)
		ms, join := h.members()
		for _, m := range ms {
			join(m)
		}
		if n, q := r.gate.joins.Load(), r.s.Queued(); n != 0 || q != 0 {
			t.Errorf("gate joins %d, queued %d; want 0, 0", n, q)
		}
		wantGate(t, r.gate, 0, 0)
	})
}

// TestBegun has one member mark its response begun and another end
// without an answer: each one's Begun closes then, and not before.
func TestBegun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 2, MaxWait: time.Hour, Timeout: time.Minute}, 2)
		leaderIn, failingIn := make(chan *Member, 1), make(chan *Member, 1)
		leader := r.arrive(t.Context(), func(ctx context.Context, m *Member) error {
			leaderIn <- m
			time.Sleep(time.Second)
			m.MarkBegun() // the first byte goes out
			m.MarkBegun() // twice is harmless
			time.Sleep(time.Second)
			return nil
		})
		errFail := errors.New("no answer")
		failing := r.arrive(t.Context(), func(ctx context.Context, m *Member) error {
			failingIn <- m
			time.Sleep(3 * time.Second)
			return errFail
		})
		at := func(m *Member) time.Duration {
			<-m.Begun()
			return r.since()
		}
		if got := at(<-leaderIn); got != time.Second {
			t.Errorf("leader's Begun closed at %v; want 1s, when it marked it", got)
		}
		if got := at(<-failingIn); got != 3*time.Second {
			t.Errorf("failing member's Begun closed at %v; want 3s, as it ended", got)
		}
		wantOutcome(t, "leader", leader, nil, 2*time.Second)
		wantOutcome(t, "failing", failing, errFail, 3*time.Second)
	})
}

// holdOne is a releaser that joins each wave's members at once but its
// first, which it keeps for the test to join later.
type holdOne struct {
	mu   sync.Mutex
	kept []func()
}

func (h *holdOne) Release(w *window.Wave[*Member], join func(*Member)) {
	for _, m := range w.Items[1:] {
		join(m)
	}
	first := w.Items[0]
	h.mu.Lock()
	h.kept = append(h.kept, func() { join(first) })
	h.mu.Unlock()
}

// seeWaves is a releaser that records the waves it is given, and joins
// their members at once, in order.
type seeWaves struct {
	mu    sync.Mutex
	waves [][]*Member
}

func (s *seeWaves) Release(w *window.Wave[*Member], join func(*Member)) {
	s.mu.Lock()
	s.waves = append(s.waves, w.Items)
	s.mu.Unlock()
	for _, m := range w.Items {
		join(m)
	}
}

// TestReleasersChain chains two releasers: the members the first joins
// during its Release reach the second together, as one wave; the one it
// joins later reaches it alone; every member is served once.
func TestReleasersChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first, second := &holdOne{}, &seeWaves{}
		r := newRig(t, Config{MaxSize: 3, MaxWait: time.Hour, Timeout: time.Minute, Releaser: Releasers{first, second}}, 3)
		var served sync.Map
		done := make(chan error, 3)
		ctx := context.Background()
		for i := range 3 {
			go func() {
				done <- r.s.Do(ctx, nil, func(context.Context, *Member) error { served.Store(i, true); return nil })
			}()
			synctest.Wait()
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		second.mu.Lock()
		if len(second.waves) != 1 || len(second.waves[0]) != 2 {
			t.Fatalf("the second releaser saw %d waves (%v); want one of the two members joined at once", len(second.waves), second.waves)
		}
		second.mu.Unlock()
		first.mu.Lock()
		kept := first.kept
		first.mu.Unlock()
		if len(kept) != 1 {
			t.Fatalf("%d members kept; want 1", len(kept))
		}
		kept[0]()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		second.mu.Lock()
		defer second.mu.Unlock()
		if len(second.waves) != 2 || len(second.waves[1]) != 1 {
			t.Fatalf("the second releaser saw %v; want the kept member alone, second", second.waves)
		}
		for i := range 3 {
			if _, ok := served.Load(i); !ok {
				t.Errorf("member %d not served", i)
			}
		}
	})
}

// An empty chain releases in order, as a nil releaser does.
func TestReleasersEmptyIsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 2, MaxWait: time.Hour, Timeout: time.Minute, Releaser: Releasers{}}, 2)
		done := make(chan error, 2)
		for range 2 {
			go func() { done <- r.s.Do(context.Background(), nil, func(context.Context, *Member) error { return nil }) }()
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	})
}
