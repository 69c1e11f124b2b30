package buckets

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/gate"
)

// The scheduler the pacing is tested under: the part of dispatch's own
// test rig (dispatch_test.go) these tests use, through dispatch's
// exported API.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rig is a scheduler under test with its gate. Build it inside a synctest
// bubble: times are virtual and exact.
type rig struct {
	s     *dispatch.Scheduler
	gate  *gate.Local
	start time.Time
}

func newRig(t *testing.T, cfg dispatch.Config, capacity int) *rig {
	t.Helper()
	g, err := gate.New(gate.Fixed(capacity), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{gate: g, start: time.Now()}
	r.s, err = dispatch.New(cfg, g, dispatch.Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.s.Close)
	return r
}

func (r *rig) since() time.Duration { return time.Since(r.start) }

// outcome is what one Do returned, and when.
type outcome struct {
	err error
	at  time.Duration
}

func wantOutcome(t *testing.T, name string, ch <-chan outcome, wantErr error, wantAt time.Duration) {
	t.Helper()
	o := <-ch
	if !errors.Is(o.err, wantErr) || o.at != wantAt {
		t.Errorf("%s: Do = %v at %v; want %v at %v", name, o.err, o.at, wantErr, wantAt)
	}
}
