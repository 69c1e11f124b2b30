package dispatch

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
)

// fakeAdmission refuses with err, holds until until, and records what it
// settles.
type fakeAdmission struct {
	err     error
	until   time.Time
	settled []int
}

func (f *fakeAdmission) Admit(*request.Descriptor, Load) error   { return f.err }
func (f *fakeAdmission) HoldUntil(*request.Descriptor) time.Time { return f.until }
func (f *fakeAdmission) Settle(_ *request.Descriptor, status int, _ http.Header) {
	f.settled = append(f.settled, status)
}

func TestChain(t *testing.T) {
	errA, errB := errors.New("a refuses"), errors.New("b refuses")
	now := time.Now()
	a := &fakeAdmission{until: now.Add(time.Second)}
	b := &fakeAdmission{err: errB, until: now.Add(2 * time.Second)}
	c := &fakeAdmission{err: errA}
	chain := Chain{a, b, c}
	if err := chain.Admit(nil, Load{}); err != errB {
		t.Errorf("Admit = %v; want the first refusal, %v", err, errB)
	}
	if got := chain.HoldUntil(nil); !got.Equal(now.Add(2 * time.Second)) {
		t.Errorf("HoldUntil = %v; want the latest hold, %v", got, now.Add(2*time.Second))
	}
	chain.Settle(nil, 429, nil)
	for i, f := range chain {
		if got := f.(*fakeAdmission).settled; !slices.Equal(got, []int{429}) {
			t.Errorf("admission %d settled %v; want [429]", i, got)
		}
	}
	if err := (Chain{}).Admit(nil, Load{}); err != nil {
		t.Errorf("empty chain: Admit = %v; want nil", err)
	}
}

// TestRateLimitHoldKeepsSlotAndOrder has the first answer report a limit
// exhausted until 5 s: the next member gets its slot and holds it until
// then, and the one behind it waits its turn.
func TestRateLimitHoldKeepsSlotAndOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset := time.Now().Add(5 * time.Second).Truncate(time.Second)
		h := http.Header{}
		h.Set("Anthropic-Ratelimit-Requests-Remaining", "0")
		h.Set("Anthropic-Ratelimit-Requests-Reset", reset.UTC().Format(time.RFC3339))
		r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute, Admission: RateLimitHold{Pacer: &pace.Pacer{}}}, 1)
		var started []time.Duration
		call := func(ctx context.Context, m *Member) error {
			started = append(started, r.since())
			m.Settle(http.StatusOK, h)
			h = http.Header{} // later answers report nothing exhausted
			return sleepFor(time.Second)(ctx, m)
		}
		first := r.arrive(t.Context(), call)
		second := r.arrive(t.Context(), call)
		third := r.arrive(t.Context(), call)
		wantOutcome(t, "first", first, nil, time.Second)
		held := reset.Sub(r.start)
		wantOutcome(t, "second", second, nil, held+time.Second)
		wantOutcome(t, "third", third, nil, held+2*time.Second)
		if want := []time.Duration{0, held, held + time.Second}; !slices.Equal(started, want) {
			t.Errorf("calls started at %v; want %v", started, want)
		}
	})
}

// learningLimit records the outcomes the gate reports.
type learningLimit struct {
	mu       sync.Mutex
	outcomes []gate.Outcome
}

func (l *learningLimit) Slots() int { return 4 }

func (l *learningLimit) Observe(o gate.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outcomes = append(l.outcomes, o)
}

// TestGateHearsOutcomes checks what the gate is told of each slot's use:
// how long it was held and how its call ended.
func TestGateHearsOutcomes(t *testing.T) {
	answer := func(err error) memberFunc {
		return func(context.Context, *Member) error { return err }
	}
	settle := func(status int) memberFunc {
		return func(_ context.Context, m *Member) error {
			time.Sleep(time.Second)
			m.Settle(status, nil)
			return nil
		}
	}
	firstToken := func(status int) memberFunc {
		return func(_ context.Context, m *Member) error {
			time.Sleep(time.Second)
			m.Settle(status, nil)
			m.FirstToken(300 * time.Millisecond)
			return nil
		}
	}
	for _, tc := range []struct {
		name string
		fn   memberFunc
		want gate.Outcome
	}{
		{"ok", settle(200), gate.Outcome{Held: time.Second, End: gate.EndOK, InFlight: 1}},
		{"rate limited", settle(429), gate.Outcome{Held: time.Second, End: gate.EndRateLimited, InFlight: 1}},
		{"overloaded", settle(529), gate.Outcome{Held: time.Second, End: gate.EndOverloaded, InFlight: 1}},
		{"no answer", answer(errors.New("connection reset")), gate.Outcome{End: gate.EndOverloaded, InFlight: 1}},
		{"nothing said", answer(nil), gate.Outcome{End: gate.EndOK, InFlight: 1}},
		{"deadline", blockUntilCancelled, gate.Outcome{Held: 2 * time.Second, End: gate.EndDeadline, InFlight: 1}},
		{"first token", firstToken(200), gate.Outcome{Held: time.Second, End: gate.EndOK, FirstToken: 300 * time.Millisecond, InFlight: 1}},
		// An error's first token (an in-band one, say) times nothing the
		// limit should learn from.
		{"first token of an error", firstToken(529), gate.Outcome{Held: time.Second, End: gate.EndOverloaded, InFlight: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := &learningLimit{}
				g, err := gate.New(l, nil)
				if err != nil {
					t.Fatal(err)
				}
				s, err := New(Config{MaxSize: 1, Timeout: 2 * time.Second}, g, Hooks{})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				s.Do(t.Context(), nil, tc.fn)
				if !slices.Equal(l.outcomes, []gate.Outcome{tc.want}) {
					t.Errorf("gate heard %v; want [%v]", l.outcomes, tc.want)
				}
			})
		})
	}
	t.Run("client gone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := &learningLimit{}
			g, _ := gate.New(l, nil)
			s, _ := New(Config{MaxSize: 1, Timeout: time.Minute}, g, Hooks{})
			defer s.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			s.Do(ctx, nil, blockUntilCancelled)
			if want := []gate.Outcome{{Held: time.Second, End: gate.EndCancelled, InFlight: 1}}; !slices.Equal(l.outcomes, want) {
				t.Errorf("gate heard %v; want %v", l.outcomes, want)
			}
		})
	})
}
