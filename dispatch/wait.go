package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/request"
)

// Start admits a request and returns at once; fn runs once the request's
// wave has been released and it holds a gate slot, which it gives back
// when fn returns. r is what is known of the request (nil: nothing).
//
// A non-nil error means the request was not admitted (its admission's
// refusal, such as ErrQueueFull or a *WaitTooLongError; ErrClosed; or
// ctx's error), and done is never called. Otherwise done is called exactly
// once, on a goroutine of the scheduler's, after fn (if it ran) returned,
// with fn's error, ErrDeadline if the wave deadline passed first, ctx's
// error if the caller left before it was served, or a *PanicError if fn
// panicked. The context passed to fn is cancelled when ctx ends or the wave
// deadline passes, whichever is first, unless fn lifted the deadline.
//
// While it waits for its wave and its slot, the request holds no goroutine
// at all: the gate's ticket calls back when the slot comes, and
// context.AfterFunc watches for its client leaving. So ten thousand
// waiting requests cost ten thousand small records, not ten thousand
// stacks.
func (s *Scheduler) Start(ctx context.Context, r *request.Descriptor, fn func(ctx context.Context, m *Member) error, done func(error)) error {
	_, err := s.admit(ctx, r, fn, done, nil)
	return err
}

// Do is Start for a caller that waits: it returns what done would have
// been called with. The caller's goroutine waits anyway, so the member is
// served on it when the slot comes, and it watches ctx itself: no
// goroutine is started for the member, none woken, and no departure watch
// registered.
func (s *Scheduler) Do(ctx context.Context, r *request.Descriptor, fn func(ctx context.Context, m *Member) error) error {
	caller := make(chan error, 1)
	m, err := s.admit(ctx, r, fn, nil, caller)
	if err != nil {
		return err
	}
	select {
	case err = <-caller:
	case <-ctx.Done():
		m.depart()
		err = <-caller // the slot may have come first after all: serve sees the departure at once
	}
	if err == errGranted {
		err = m.serve()
		m.giveBack()
	}
	return err
}

// errGranted tells a waiting caller (Do) that its member holds its slot.
var errGranted = errors.New("dispatch: granted")

// admit admits a request and puts its member in a window. The member
// reports to done, or, if caller is set, hands its slot and its end to
// the caller waiting on that channel (Do), which ends it itself once
// served.
func (s *Scheduler) admit(ctx context.Context, r *request.Descriptor, fn func(ctx context.Context, m *Member) error, done func(error), caller chan error) (*Member, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // gone already: must not take a place in a window, or fill one
	}
	if r == nil {
		r = new(request.Descriptor)
	}
	// Count the member before it is admitted, so that a cap holds exactly
	// even when many arrive at once.
	if err := s.admission.Admit(r, s.load(s.queued.Add(1)-1)); err != nil {
		s.queued.Add(-1)
		return nil, err
	}
	m := &Member{s: s, req: r, joined: time.Now(), ctx: ctx, fn: fn, done: done, caller: caller, more: moreNotes()}
	if s.tenants != nil {
		t, err := s.tenants.Enter(r)
		if err != nil {
			s.queued.Add(-1)
			return nil, err
		}
		m.tenant = t
	}
	m.fillTicket()
	m.ticket.OnGrant(m.grant)
	held := s.heldBack(r) // before m is in a window, where another's flush may route it
	wave, err := s.win.Add(m)
	if err != nil {
		s.queued.Add(-1)
		m.leftWaiting()
		return nil, ErrClosed
	}
	s.releaseIfIdle(held, wave)
	if caller == nil {
		// Watch for departure only now that m is in a window, so that the
		// watch always finds it there or past it. (Add may even have
		// granted it a slot, and it may have ended already.)
		m.sig.watch(context.AfterFunc(ctx, m.depart))
	}
	return m, nil
}

// watch keeps the departure watch's stop, to call it when the member ends;
// if it has ended already, it stops the watch at once.
func (sig *signals) watch(stop func() bool) {
	sig.mu.Lock()
	ended := sig.ended
	if !ended {
		sig.stopWatch = stop
	}
	sig.mu.Unlock()
	if ended {
		stop()
	}
}

// grant is m's ticket being granted a slot, called by the gate under its
// lock: m gets a goroutine to be served on, or its waiting caller's. It declines the slot if m's
// wait has already ended otherwise (its client left, or its deadline
// passed).
func (m *Member) grant() bool {
	if !m.move(inLine, granted) {
		return false
	}
	if m.caller != nil {
		m.caller <- errGranted // buffered: never blocks
	} else {
		go m.inSlot()
	}
	return true
}

// A member ends one of three ways, each with its verb: it is served
// (inSlot), its client departs (depart), or its wave deadline passes
// while it waits (quitWaiting with ErrDeadline). A departing or timed-out
// member quits waiting (quitWaiting) unless it never reached a wave; every
// way ends in report, which gives its policies back what it held
// (giveBack) and closes its signals.

// depart is m's context ending: if m is still waiting, it leaves the
// window or the line, and its caller hears ctx's error. A member whose
// wave is closing right now is in neither; flush looks at its context again
// once it is past the window.
func (m *Member) depart() {
	err := m.ctx.Err()
	switch {
	case m.s.win.Withdraw(m):
		m.move(inWindow, leaving) // nobody else moves a member in a window
		m.s.queued.Add(-1)
		m.leftWaiting()
		m.report(err) // it never reached a wave
	case m.move(flushed, leaving):
		m.quitWaiting(err)
	case m.move(inLine, leaving):
		m.quitWaiting(err)
	}
}

// quitWaiting ends the wait of a member that was moved to leaving from its
// released wave or the gate's line: it leaves the line, if it is in it, and
// its caller hears err.
func (m *Member) quitWaiting(err error) {
	<-m.wave.Done() // the flush that released m is done with its deadline
	m.s.gate.Leave(&m.ticket)
	m.s.queued.Add(-1)
	m.leftWaiting()
	m.deadline.finish()
	m.report(err)
}

// report tells m's caller how its request ended (err), once, after its
// policies are given back what it held.
func (m *Member) report(err error) {
	m.giveBack()
	if m.caller != nil {
		m.caller <- err
	} else {
		m.done(err)
	}
}

// giveBack ends m's passage: its policies give back what it held of
// them, and its signals end.
func (m *Member) giveBack() {
	if m.s.pacing != nil {
		m.s.pacing.End(m)
	}
	if m.s.routing != nil {
		m.s.routing.End(m)
	}
	m.sig.close()
}

// close marks the member ended: Begun closes, and the departure watch is
// dropped.
func (sig *signals) close() {
	sig.mu.Lock()
	sig.ended = true
	after := sig.markBegun(false) // a releaser waiting on it is let go
	stop := sig.stopWatch
	sig.mu.Unlock()
	if stop != nil {
		stop()
	}
	for _, f := range after {
		f(false)
	}
}

// fillTicket readies m's ticket for the gate's order: its tenant, cost,
// class, weight and limit.
func (m *Member) fillTicket() {
	if m.tenant != nil {
		m.s.tenants.Ticket(&m.ticket, m.tenant, m.req)
		return
	}
	m.ticket.Key = m.req.Tenant
	m.ticket.Cost = int64(m.req.Cost.InputTokens) + int64(m.req.Cost.MaxTokens)
}

// leftWaiting counts m, which waited, out of its tenant without a slot.
func (m *Member) leftWaiting() {
	if m.tenant != nil {
		m.s.tenants.Left(m.tenant, m.req)
	}
}
