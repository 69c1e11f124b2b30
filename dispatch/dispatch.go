// Package dispatch releases requests in waves: it collects them in a window,
// puts each closed wave in line at the gate in arrival order, and holds every
// member to a hard deadline counted from its wave's flush. It knows nothing
// of HTTP; the proxy hands it one function per request.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/window"
)

// Config sets the window and the deadline. Every field must be positive
// except MaxWait, which may be zero.
type Config struct {
	MaxSize int           // BATCH_MAX_SIZE: a window closes at this many members
	MaxWait time.Duration // BATCH_MAX_WAIT_MS: ...or this long after its first member
	Timeout time.Duration // BATCH_TIMEOUT_S: each member's deadline, counted from the flush
	// MaxQueue caps the members waiting, in an open window or for a slot
	// (BATCH_MAX_QUEUE). Past it Do fails at once with ErrQueueFull. Zero
	// means no cap.
	MaxQueue int
	// Hold, if set, says until when upstream calls are to be held back (the
	// upstream reported a rate limit exhausted until then). A member that
	// gets its slot waits, holding the slot, until that time: so everyone
	// behind it keeps their place in line, and arrival order is kept.
	Hold func() time.Time
}

// ErrDeadline is returned when a member's wave deadline passed before its
// function finished (or, for a member that lifted the deadline, before it
// did so).
var ErrDeadline = errors.New("dispatch: wave deadline passed")

// ErrQueueFull is returned by Do, at once, when MaxQueue members are already
// waiting: shedding the excess keeps waiting and memory bounded however hard
// clients push.
var ErrQueueFull = errors.New("dispatch: queue full")

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("dispatch: closed")

// PanicError is returned by Do when the member's function panicked. The panic
// is contained to that member.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("dispatch: member panicked: %v", e.Value) }

// Hooks are optional observers, called synchronously; they must be quick.
type Hooks struct {
	// Flushed is called once per wave, before its members are put in line.
	Flushed func(waveID uint64, size int, reason window.Reason)
}

// Scheduler owns one window and shares one gate among all its waves.
type Scheduler struct {
	win      *window.Window[*Member]
	gate     gate.Gate
	timeout  time.Duration
	maxQueue int64
	hold     func() time.Time
	hooks    Hooks
	queued   atomic.Int64 // members in an open window or waiting for a slot
}

// New returns a scheduler that releases its waves through g.
func New(cfg Config, g gate.Gate, hooks Hooks) (*Scheduler, error) {
	if cfg.Timeout <= 0 {
		return nil, errors.New("dispatch: timeout must be positive")
	}
	if g == nil {
		return nil, errors.New("dispatch: gate is nil")
	}
	if cfg.MaxQueue < 0 {
		return nil, errors.New("dispatch: max queue must not be negative")
	}
	s := &Scheduler{gate: g, timeout: cfg.Timeout, maxQueue: int64(cfg.MaxQueue), hold: cfg.Hold, hooks: hooks}
	win, err := window.New(cfg.MaxSize, cfg.MaxWait, s.flush)
	if err != nil {
		return nil, err
	}
	s.win = win
	return s, nil
}

// Member is one request's passage through the scheduler. The function given
// to Do receives it to learn its wave and to lift its deadline.
type Member struct {
	s        *Scheduler
	ticket   gate.Ticket
	wave     *window.Wave[*Member]
	deadline *waveDeadline
	joined   time.Time
	granted  time.Time
	lifted   atomic.Bool
}

// WaveID is the id of the member's wave.
func (m *Member) WaveID() uint64 { return m.wave.ID }

// FlushReason says why the member's wave closed.
func (m *Member) FlushReason() window.Reason { return m.wave.Reason }

// QueueWait is how long the member waited, in its window and for a slot.
func (m *Member) QueueWait() time.Duration { return m.granted.Sub(m.joined) }

// SlotWait is how long the member waited for a slot after its wave closed.
func (m *Member) SlotWait() time.Duration { return m.granted.Sub(m.wave.ClosedAt) }

// Deadline is the time by which the member's function must finish, unless it
// lifts the deadline first.
func (m *Member) Deadline() time.Time { return m.wave.ClosedAt.Add(m.deadline.timeout) }

// LiftDeadline ends the deadline's hold on the member: from now on only the
// caller's own context governs. A streaming relay calls it once the response
// headers are in, since a stream's length is not bounded by the wave. It
// reports false if the deadline had already passed.
func (m *Member) LiftDeadline() bool {
	m.lifted.Store(true)
	return m.deadline.ctx.Err() == nil
}

// Requeue gives the member's slot back, waits d (a retry's backoff), and
// joins the back of the gate's line again; it returns once the member holds
// a slot anew, or ctx's error (fn's context: the client left or the wave
// deadline passed) without a slot. Only the function given to Do may call it.
//
// The back of the line, not the front: a retry has already had its turn
// with an upstream that is failing, and its backoff gives the slot to
// requests that have waited in order, so retries cannot starve fresh
// requests during an outage. It also needs nothing of a gate beyond Join,
// so every kind of gate supports it.
func (m *Member) Requeue(ctx context.Context, d time.Duration) error {
	s := m.s
	s.gate.Release(&m.ticket)
	m.ticket = gate.Ticket{} // released tickets are done; a fresh one joins anew
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.queued.Add(1) // waiting again, but already admitted: never shed here
	s.gate.Join(&m.ticket)
	select {
	case <-m.ticket.Ready():
		s.queued.Add(-1)
		return s.waitHold(ctx)
	case <-ctx.Done():
		s.queued.Add(-1)
		s.gate.Leave(&m.ticket)
		return ctx.Err()
	}
}

// waitHold waits, holding the slot, until the Hold time has passed or ctx
// ends. It looks again after each wait, since a response that came in
// meanwhile may have moved the hold.
func (s *Scheduler) waitHold(ctx context.Context) error {
	if s.hold == nil {
		return nil
	}
	for {
		d := time.Until(s.hold())
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// waveDeadline is shared by all members of a wave: one timer a wave, not one
// a member.
type waveDeadline struct {
	timeout time.Duration
	ctx     context.Context // done when the deadline passes
	cancel  context.CancelFunc
	live    atomic.Int32 // members not yet finished; the last stops the timer
}

func (s *Scheduler) flush(w *window.Wave[*Member]) {
	if s.hooks.Flushed != nil {
		s.hooks.Flushed(w.ID, len(w.Items), w.Reason)
	}
	d := &waveDeadline{timeout: s.timeout}
	d.ctx, d.cancel = context.WithDeadline(context.Background(), w.ClosedAt.Add(s.timeout))
	d.live.Store(int32(len(w.Items)))
	for _, m := range w.Items {
		m.deadline = d
		s.gate.Join(&m.ticket)
	}
}

// finish marks one member of the wave done; the last one stops the timer.
func (d *waveDeadline) finish() {
	if d.live.Add(-1) == 0 {
		d.cancel()
	}
}

// Do runs fn for one request once the request's wave has been released and
// it holds a gate slot, then gives the slot back. The context passed to fn is
// cancelled when ctx ends or the wave deadline passes, whichever is first,
// unless fn lifted the deadline. Do returns fn's error, ErrDeadline if the
// deadline passed first, ctx's error if the caller left before it was
// served, or a *PanicError if fn panicked.
func (s *Scheduler) Do(ctx context.Context, fn func(ctx context.Context, m *Member) error) error {
	// Count the member before it joins, so that the cap holds exactly even
	// when many arrive at once.
	if n := s.queued.Add(1); s.maxQueue > 0 && n > s.maxQueue {
		s.queued.Add(-1)
		return ErrQueueFull
	}
	m := &Member{s: s, joined: time.Now()}
	wave, err := s.win.Add(m)
	if err != nil {
		s.queued.Add(-1)
		return ErrClosed
	}
	m.wave = wave

	// Wait for the window to close.
	select {
	case <-wave.Done():
	case <-ctx.Done():
		if s.win.Withdraw(m) {
			s.queued.Add(-1)
			return ctx.Err() // departed before its wave: never reaches the gate
		}
		<-wave.Done() // the wave is closing right now; let it finish
	}
	defer m.deadline.finish()

	// Wait for a slot.
	select {
	case <-m.ticket.Ready():
	case <-ctx.Done():
		s.queued.Add(-1)
		s.gate.Leave(&m.ticket)
		return ctx.Err()
	case <-m.deadline.ctx.Done():
		s.queued.Add(-1)
		s.gate.Leave(&m.ticket)
		return ErrDeadline
	}
	s.queued.Add(-1)
	m.granted = time.Now()
	defer s.gate.Release(&m.ticket)
	if ctx.Err() != nil {
		return ctx.Err() // a departed client whose slot raced in
	}

	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(m.deadline.ctx, func() {
		if !m.lifted.Load() {
			cancel(ErrDeadline)
		}
	})
	defer stop()
	if err := s.waitHold(callCtx); err != nil {
		if context.Cause(callCtx) == ErrDeadline {
			return ErrDeadline
		}
		return err
	}
	m.granted = time.Now() // the hold counts as waiting
	err = run(callCtx, m, fn)
	if err != nil && context.Cause(callCtx) == ErrDeadline {
		return ErrDeadline
	}
	return err
}

// run calls fn, turning a panic into a *PanicError so that one member's
// panic touches no other member.
func run(ctx context.Context, m *Member, fn func(context.Context, *Member) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, m)
}

// Flush releases the open window now; the server calls it on shutdown so
// that nobody waits out MaxWait.
func (s *Scheduler) Flush() { s.win.Flush() }

// Close releases the open window and refuses new members.
func (s *Scheduler) Close() { s.win.Close() }

// Full reports whether the queue is at its cap, so a caller can shed a
// request before spending anything on it. Do enforces the cap exactly.
func (s *Scheduler) Full() bool { return s.maxQueue > 0 && s.queued.Load() >= s.maxQueue }

// Queued reports how many members are in an open window or waiting for a
// slot.
func (s *Scheduler) Queued() int { return int(s.queued.Load()) }

// Pending reports how many members are in the open window.
func (s *Scheduler) Pending() int { return s.win.Pending() }
