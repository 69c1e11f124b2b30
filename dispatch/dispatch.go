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
	"sync"
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

// WaitTooLongError is returned by DoWithin, at once, when the wait the
// request would face in line is longer than its client will wait: admitting
// it would only let it reach a slot as its client gives up, wasting the slot
// and the upstream's work on an answer nobody reads.
type WaitTooLongError struct {
	Expected time.Duration // the estimated wait for a slot
	Patience time.Duration // what the client said it would wait in all
}

func (e *WaitTooLongError) Error() string {
	return fmt.Sprintf("dispatch: expected wait %s plus service exceeds the client's %s", e.Expected, e.Patience)
}

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("dispatch: closed")

// PanicError is returned by Do when the member's function panicked. The panic
// is contained to that member.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("dispatch: member panicked: %v", e.Value) }

// Hooks are optional observers, called synchronously; they must be quick
// and must not call back into the Scheduler (Flushed runs while the window
// is closing, and every Add waits for it).
type Hooks struct {
	// Flushed is called once per wave, before its members are put in line.
	Flushed func(waveID uint64, size int, reason window.Reason)
	// Started is called when a member holds its slot, just before its
	// function runs, with the ctx given to Do. When it is set, the member
	// also records when it gives its slot back (see Member.Released).
	Started func(ctx context.Context, m *Member)
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
	// service is a moving average of how long a member holds its slot, in
	// nanoseconds: the turnover rate of the gate, for DoWithin's estimate.
	service atomic.Int64
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
	heldFrom time.Time // when the slot now held was granted (again, after a Requeue)
	released time.Time // set only when Hooks.Started is

	mu     sync.Mutex              // orders start and LiftDeadline against the deadline's sweep
	cancel context.CancelCauseFunc // cancels fn's ctx; nil until fn starts
	lifted bool

	// What Start was given. A waiting member holds no goroutine: its wait
	// ends in whichever of the gate (a slot), the context (its client
	// left) or the wave deadline claims it first.
	ctx     context.Context
	fn      func(ctx context.Context, m *Member) error
	done    func(error)
	wake    chan<- error // set when the caller waits to run fn itself (DoWithin)
	claimed atomic.Bool  // its wait has ended; whoever set it finishes the wait
	inLine  atomic.Bool  // its wave's flush has put its ticket in the gate's line
	stop    func() bool  // unregisters the departure watch; under mu
	ended   bool         // done has been called; under mu
}

// WaveID is the id of the member's wave.
func (m *Member) WaveID() uint64 { return m.wave.ID }

// FlushReason says why the member's wave closed.
func (m *Member) FlushReason() window.Reason { return m.wave.Reason }

// QueueWait is how long the member waited, in its window and for a slot.
func (m *Member) QueueWait() time.Duration { return m.granted.Sub(m.joined) }

// Granted is when the member got its slot.
func (m *Member) Granted() time.Time { return m.granted }

// Released is when the member gave its slot back; zero until then, and
// always zero unless Hooks.Started is set. Read it after Do returns.
func (m *Member) Released() time.Time { return m.released }

// SlotWait is how long the member waited for a slot after its wave closed.
func (m *Member) SlotWait() time.Duration { return m.granted.Sub(m.wave.ClosedAt) }

// Deadline is the time by which the member's function must finish, unless it
// lifts the deadline first.
func (m *Member) Deadline() time.Time { return m.wave.ClosedAt.Add(m.deadline.timeout) }

// LiftDeadline ends the deadline's hold on the member: from now on only the
// caller's own context governs. A streaming relay calls it once the response
// headers are in, since a stream's length is not bounded by the wave. It
// reports false if the deadline had already passed; the deadline then keeps
// its hold, and fn's ctx is or will be cancelled with it.
func (m *Member) LiftDeadline() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deadline.passed() {
		return false
	}
	m.lifted = true
	return true
}

// start puts fn's ctx under the deadline: cancel is called with ErrDeadline
// when it passes. It reports false if it has passed already.
func (m *Member) start(cancel context.CancelCauseFunc) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deadline.passed() {
		return false
	}
	m.cancel = cancel
	return true
}

// expire is the deadline's sweep reaching m: a running fn that has not lifted
// the deadline is cancelled. (A member still waiting for a slot sees
// deadline.done itself.)
func (m *Member) expire() {
	if m.claimed.CompareAndSwap(false, true) {
		go m.abandon(ErrDeadline) // still in line: it leaves it, and its caller hears why
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cancel != nil && !m.lifted {
		m.cancel(ErrDeadline)
	}
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
	s.gate.Release(&m.ticket, gate.Outcome{})
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
		err := s.waitHold(ctx)
		m.heldFrom = time.Now() // the backoff and the wait are not service
		return err
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
// a member, and no context of its own, so that a member costs no allocation
// for it.
type waveDeadline struct {
	timeout time.Duration
	members []*Member
	done    chan struct{} // closed when the deadline passes
	timer   *time.Timer
	live    atomic.Int32 // members not yet finished; the last stops the timer
}

func (s *Scheduler) flush(w *window.Wave[*Member]) {
	if s.hooks.Flushed != nil {
		s.hooks.Flushed(w.ID, len(w.Items), w.Reason)
	}
	d := &waveDeadline{timeout: s.timeout, members: w.Items, done: make(chan struct{})}
	d.live.Store(int32(len(w.Items)))
	for _, m := range w.Items {
		m.wave, m.deadline = w, d
		s.gate.Join(&m.ticket)
		m.inLine.Store(true)
		// A client that left while its wave was closing found it not yet
		// in line (see depart); look again now that it is.
		if m.ctx.Err() != nil && m.claimed.CompareAndSwap(false, true) {
			go m.abandon(m.ctx.Err())
		}
	}
	// Members read d.timer only after the wave is done, that is after flush
	// returns.
	if due := time.Until(w.ClosedAt.Add(s.timeout)); due > 0 {
		d.timer = time.AfterFunc(due, d.expire)
	} else {
		d.expire() // the flush itself took longer than the timeout
	}
}

// expire runs when the deadline passes: members waiting for a slot see done
// closed, running ones are cancelled. done is closed first so that a member
// starting concurrently either sees it or is seen by the sweep.
func (d *waveDeadline) expire() {
	close(d.done)
	for _, m := range d.members {
		m.expire()
	}
}

func (d *waveDeadline) passed() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// finish marks one member of the wave done; the last one stops the timer.
func (d *waveDeadline) finish() {
	if d.live.Add(-1) == 0 && d.timer != nil {
		d.timer.Stop()
	}
}

// Do runs fn for one request once the request's wave has been released and
// it holds a gate slot, then gives the slot back. The context passed to fn is
// cancelled when ctx ends or the wave deadline passes, whichever is first,
// unless fn lifted the deadline. Do returns fn's error, ErrDeadline if the
// deadline passed first, ctx's error if the caller left before it was
// served, or a *PanicError if fn panicked.
func (s *Scheduler) Do(ctx context.Context, fn func(ctx context.Context, m *Member) error) error {
	return s.DoWithin(ctx, 0, fn)
}

// DoWithin is Do for a request whose client gives up after patience (zero:
// unknown). When the expected wait for a slot plus the average service time
// exceeds patience, it fails at once with a *WaitTooLongError instead of
// queueing: under sustained overload a FIFO queue otherwise grows until
// every request reaches its slot just as its client leaves.
func (s *Scheduler) DoWithin(ctx context.Context, patience time.Duration, fn func(ctx context.Context, m *Member) error) error {
	// The caller's goroutine waits anyway, so fn runs on it when the slot
	// comes (no goroutine is started for it, and none woken). wake carries
	// either errGranted or how the wait ended without a slot.
	wake := make(chan error, 1)
	m, err := s.start(ctx, patience, fn, nil, wake)
	if err != nil {
		return err
	}
	select {
	case err = <-wake:
	case <-ctx.Done():
		m.depart()
		err = <-wake // the slot may have come first after all: serve sees the departure at once
	}
	if err != errGranted {
		return err
	}
	return m.runHere()
}

// errGranted tells DoWithin's caller that its member holds its slot.
var errGranted = errors.New("dispatch: granted")

// Start is DoWithin for a caller that does not wait: it returns at once. A
// non-nil error means the request was not admitted (ErrQueueFull, a
// *WaitTooLongError, ErrClosed, or ctx's error), and done is never called.
// Otherwise done is called exactly once, on a goroutine of the scheduler's,
// with what DoWithin would have returned, after fn (if it ran) returned.
//
// While it waits for its wave and its slot, the request holds no goroutine
// at all: fn gets one when the request holds its slot. So ten thousand
// waiting requests cost ten thousand small records, not ten thousand
// stacks.
func (s *Scheduler) Start(ctx context.Context, patience time.Duration, fn func(ctx context.Context, m *Member) error, done func(error)) error {
	_, err := s.start(ctx, patience, fn, done, nil)
	return err
}

// start admits a member. When its slot comes, it runs on a goroutine of
// its own and reports to done; or, if wake is set, wake gets errGranted
// (or how the wait ended otherwise) and the caller runs it.
func (s *Scheduler) start(ctx context.Context, patience time.Duration, fn func(ctx context.Context, m *Member) error, done func(error), wake chan<- error) (*Member, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // gone already: must not take a place in a window, or fill one
	}
	if patience > 0 {
		if wait := s.ExpectedWait(); wait > 0 && wait+s.ServiceTime() > patience {
			return nil, &WaitTooLongError{Expected: wait, Patience: patience}
		}
	}
	// Count the member before it joins, so that the cap holds exactly even
	// when many arrive at once.
	if n := s.queued.Add(1); s.maxQueue > 0 && n > s.maxQueue {
		s.queued.Add(-1)
		return nil, ErrQueueFull
	}
	m := &Member{s: s, joined: time.Now(), ctx: ctx, fn: fn, done: done, wake: wake}
	m.ticket.OnGrant(m.grant)
	if _, err := s.win.Add(m); err != nil {
		s.queued.Add(-1)
		return nil, ErrClosed
	}
	if wake != nil {
		return m, nil // its caller watches ctx itself, as it waits
	}
	// Watch for departure only now that m is in a window, so that the
	// watch always finds it there or past it. (Add may even have granted
	// it a slot already: then the watch finds it claimed.)
	stop := context.AfterFunc(ctx, m.depart)
	m.mu.Lock()
	if m.ended {
		stop() // it is all over already
	} else {
		m.stop = stop
	}
	m.mu.Unlock()
	return m, nil
}

// grant is m's ticket being granted a slot, called by the gate under its
// lock: m's function gets its goroutine. It declines the slot if m's wait
// has already ended otherwise (its client left, or its deadline passed).
func (m *Member) grant() bool {
	if !m.claimed.CompareAndSwap(false, true) {
		return false
	}
	if m.wake != nil {
		m.wake <- errGranted // its caller is waiting to run it (buffered: never blocks)
	} else {
		go m.run()
	}
	return true
}

// depart is m's context ending: if m is still waiting, it leaves the
// window or the line, and its caller hears ctx's error. A member whose
// wave is closing right now is not yet in line; flush looks at its context
// again once it is.
func (m *Member) depart() {
	s := m.s
	if s.win.Withdraw(m) {
		if m.claimed.CompareAndSwap(false, true) { // always: nobody else claims a member in a window
			s.queued.Add(-1)
			m.end(m.ctx.Err()) // never reached the gate; no wave counts it
		}
		return
	}
	if m.inLine.Load() && m.claimed.CompareAndSwap(false, true) {
		m.abandon(m.ctx.Err())
	}
}

// abandon ends the wait of a member in line that was claimed by its
// departure or its deadline: it leaves the line and its caller hears err.
func (m *Member) abandon(err error) {
	s := m.s
	<-m.wave.Done() // the flush that put m in line is done with its deadline
	s.gate.Leave(&m.ticket)
	s.queued.Add(-1)
	m.deadline.finish()
	m.end(err)
}

// run is the goroutine of a member that holds its slot.
func (m *Member) run() { m.end(m.runHere()) }

// runHere serves m, which holds its slot, on the calling goroutine.
func (m *Member) runHere() error {
	// The slot may come while the wave's flush is still under way (from
	// its Join); the wave's deadline is armed only once the flush is done.
	<-m.wave.Done()
	m.s.queued.Add(-1)
	m.granted = time.Now()
	return m.s.serve(m)
}

// end reports err to m's caller, once, and drops the departure watch.
func (m *Member) end(err error) {
	if m.wake != nil {
		m.wake <- err // DoWithin's caller: no watch to drop
		return
	}
	m.mu.Lock()
	m.ended = true
	stop := m.stop
	m.mu.Unlock()
	if stop != nil {
		stop()
	}
	m.done(err)
}

// serve runs m's function in its slot, under its deadline and its
// context, and gives the slot back.
func (s *Scheduler) serve(m *Member) error {
	defer m.deadline.finish()
	defer s.release(m)
	ctx := m.ctx
	if ctx.Err() != nil {
		return ctx.Err() // a departed client whose slot raced in
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !m.start(cancel) {
		return ErrDeadline // the slot and the deadline were both in when we looked
	}
	if err := s.waitHold(callCtx); err != nil {
		if context.Cause(callCtx) == ErrDeadline {
			return ErrDeadline
		}
		return err
	}
	m.granted = time.Now() // the hold counts as waiting
	m.heldFrom = m.granted
	if s.hooks.Started != nil {
		s.hooks.Started(ctx, m)
	}
	err := run(callCtx, m, m.fn)
	if err != nil && context.Cause(callCtx) == ErrDeadline {
		return ErrDeadline
	}
	return err
}

// release gives m's slot back and feeds the service-time average.
func (s *Scheduler) release(m *Member) {
	now := time.Now()
	if s.hooks.Started != nil {
		m.released = now
	}
	s.gate.Release(&m.ticket, gate.Outcome{})
	if !m.heldFrom.IsZero() { // zero: it left before its call began
		s.observeService(now.Sub(m.heldFrom))
	}
}

// observeService folds one slot-hold time into the moving average (weight
// 1/8: recent enough to follow a latency spike within a few calls, smooth
// enough not to jump on one slow stream).
func (s *Scheduler) observeService(d time.Duration) {
	for {
		old := s.service.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if s.service.CompareAndSwap(old, next) {
			return
		}
	}
}

// ServiceTime is the moving average of how long a request holds its slot;
// zero until one has finished.
func (s *Scheduler) ServiceTime() time.Duration { return time.Duration(s.service.Load()) }

// ExpectedWait estimates how long a request arriving now would wait for a
// slot: with FIFO slots turning over every ServiceTime, the requests ahead
// of it beyond the free slots drain at capacity per ServiceTime.
func (s *Scheduler) ExpectedWait() time.Duration {
	svc := s.service.Load()
	st := s.gate.Stats()
	if svc == 0 || st.Capacity == 0 {
		return 0
	}
	ahead := s.queued.Load() - int64(st.Capacity-st.InFlight)
	if ahead < 0 {
		return 0
	}
	return time.Duration((ahead + 1) * svc / int64(st.Capacity))
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

// Flush releases the open window now.
func (s *Scheduler) Flush() { s.win.Flush() }

// Drain releases the open window now and every later member at once,
// without a window; the server calls it on shutdown so that nobody accepted
// before the signal waits out MaxWait.
func (s *Scheduler) Drain() { s.win.Drain() }

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
