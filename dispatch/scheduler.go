// Package dispatch releases requests in waves: it collects them in a
// window, hands each closed wave to its Releaser (or a chain of them,
// Releasers) that puts its members in line at the gate, and holds every
// member to a hard deadline counted from its wave's flush. An Admission
// decides who may wait at all (and, under RATE_LIMIT_PACING=reset, holds a
// granted member back until an exhausted limit resets); a Pacing holds a
// released member outside the gate until its upstream key's rate limits
// can take it (RATE_LIMIT_PACING=buckets, the default); Tenants name and
// limit each member's tenant. Each policy keeps its per-request state in a
// Note of its own. The policies are packages of their own (cacheaware,
// buckets, tenants) that use only what this package exports: the seams
// above, and what a Member tells of itself. It knows nothing of HTTP
// beyond the status and headers an answer reports; the proxy hands it one
// function per request, run once the member holds its slot.
package dispatch

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/window"
)

// Config sets the window, the deadline and the policies. MaxSize and
// Timeout must be positive; MaxWait may be zero.
type Config struct {
	MaxSize int           // BATCH_MAX_SIZE: a window closes at this many members
	MaxWait time.Duration // BATCH_MAX_WAIT_MS: ...or this long after its first member
	Timeout time.Duration // BATCH_TIMEOUT_S: each member's deadline, counted from the flush
	// Admission decides whether a request may wait, how long a granted
	// member is held back, and learns from each answer. If nil, every
	// request is admitted and none is held.
	Admission Admission
	// Releaser puts the members of each closed wave in line. If nil,
	// InOrder: all at once, in arrival order.
	Releaser Releaser
	// IdleRelease (BATCH_IDLE_RELEASE) closes a window at once when its
	// members would all find free slots with nobody ahead of them and the
	// admission holds none back: MaxWait is then a maximum wait (see
	// idle.go). Off, every window waits out MaxWait or fills.
	IdleRelease bool
	// Pacing, if set, holds released members outside the gate until their
	// upstream key's rate limits can take them (buckets.Pacing), and
	// learns from each answer.
	Pacing Pacing
	// Tenants, if set, names each member's tenant in the gate's line
	// (bounded in number), counts what each tenant has waiting and in
	// flight, and sheds a tenant's request past its limit (see package
	// tenants). If nil, a ticket's key is the request's tenant as it came,
	// and no tenant is shed.
	Tenants Tenants
	// Routing, if set, chooses the upstream key each member goes with
	// (see Routing), before its pacing. If nil, each request spends the
	// key it came with.
	Routing Routing
	// Learners hear each answer's usage (Member.Used), after the pacing.
	Learners []Learner
}

// ErrClosed is returned after Close.
var ErrClosed = errors.New("dispatch: closed")

// Hooks are optional observers, called synchronously; they must be quick
// and must not call back into the Scheduler (Flushed runs while the window
// is closing, and every Add waits for it).
type Hooks struct {
	// Flushed is called once per wave, before its members are released.
	Flushed func(waveID uint64, size int, reason window.Reason)
	// Started is called when a member holds its slot, just before its
	// function runs, with the member's ctx. When it is set, the member also
	// records when it gives its slot back (see Member.Released).
	Started func(ctx context.Context, m *Member)
}

// Scheduler owns one window and shares one gate among all its waves.
type Scheduler struct {
	win         *window.Window[*Member]
	gate        gate.Gate
	timeout     time.Duration
	admission   Admission
	recheck     []Recheck // the admissions that look again at a release; nil: none
	releaser    Releaser
	pacing      Pacing
	hooks       Hooks
	queued      atomic.Int64 // members in an open window, a released wave or the gate's line
	idleRelease bool
	tenants     Tenants // nil: none counted
	routing     Routing // nil: no routing
	learners    []Learner
	service     serviceTime
}

// New returns a scheduler that releases its waves through g.
func New(cfg Config, g gate.Gate, hooks Hooks) (*Scheduler, error) {
	if cfg.Timeout <= 0 {
		return nil, errors.New("dispatch: timeout must be positive")
	}
	if g == nil {
		return nil, errors.New("dispatch: gate is nil")
	}
	s := &Scheduler{gate: g, timeout: cfg.Timeout, admission: cfg.Admission, releaser: cfg.Releaser, pacing: cfg.Pacing, hooks: hooks, idleRelease: cfg.IdleRelease, tenants: cfg.Tenants, routing: cfg.Routing, learners: cfg.Learners}
	if s.admission == nil {
		s.admission = Open{}
	}
	s.recheck = rechecks(s.admission)
	if s.releaser == nil {
		s.releaser = InOrder{}
	}
	win, err := window.New(cfg.MaxSize, cfg.MaxWait, s.flush)
	if err != nil {
		return nil, err
	}
	s.win = win
	return s, nil
}

// Flush releases the open window now.
func (s *Scheduler) Flush() { s.win.Flush() }

// Drain releases the open window now and every later member at once,
// without a window; the server calls it on shutdown so that nobody accepted
// before the signal waits out MaxWait.
func (s *Scheduler) Drain() { s.win.Drain() }

// Close releases the open window and refuses new members.
func (s *Scheduler) Close() { s.win.Close() }

// Full reports whether the admission would refuse any request now, before
// it is read (the queue is at its cap), so that a caller can shed it before
// spending anything on it. Start enforces the admission exactly.
func (s *Scheduler) Full() bool { return s.admission.Admit(nil, s.load(s.queued.Load())) != nil }

// Queued reports how many members are waiting: in an open window, in a
// wave not yet put in line, or for a slot.
func (s *Scheduler) Queued() int { return int(s.queued.Load()) }

// Tenants is the scheduler's tenant policy; nil when it has none.
func (s *Scheduler) Tenants() Tenants { return s.tenants }

// Pending reports how many members are in the open window.
func (s *Scheduler) Pending() int { return s.win.Pending() }
