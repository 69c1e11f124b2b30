package cacheaware

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/window"
)

// The scheduler the release is tested under: the part of dispatch's own
// test rig (dispatch_test.go) these tests use, through dispatch's
// exported API.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingGate is a static gate that counts the tickets put in line, so a
// test can tell that a member never reached the gate at all.
type countingGate struct {
	*gate.Local
	joins atomic.Int64
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
	s     *dispatch.Scheduler
	gate  *countingGate
	start time.Time

	mu      sync.Mutex
	flushes []flushEvent
}

func newRig(t *testing.T, cfg dispatch.Config, capacity int) *rig {
	t.Helper()
	st, err := gate.New(gate.Fixed(capacity), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{gate: &countingGate{Local: st}, start: time.Now()}
	r.s, err = dispatch.New(cfg, r.gate, dispatch.Hooks{Flushed: func(id uint64, size int, reason window.Reason) {
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

type memberFunc = func(context.Context, *dispatch.Member) error

// sleepFor is a member function that takes d, or less if its ctx ends.
func sleepFor(d time.Duration) memberFunc {
	return func(ctx context.Context, _ *dispatch.Member) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return fmt.Errorf("upstream call: %w", ctx.Err())
		}
	}
}

// mustNotRun is a member function that fails the test if it is ever called.
func mustNotRun(t *testing.T, name string) memberFunc {
	return func(context.Context, *dispatch.Member) error {
		t.Errorf("%s: fn was called", name)
		return nil
	}
}
