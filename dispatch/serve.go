package dispatch

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
)

// PanicError is what a member's caller hears when its function panicked.
// The panic is contained to that member.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("dispatch: member panicked: %v", e.Value) }

// inSlot is the goroutine of a member granted its slot.
func (m *Member) inSlot() { m.report(m.serve()) }

// serve runs m's function in its slot, under its deadline and its context,
// and gives the slot back.
func (m *Member) serve() (err error) {
	s := m.s
	// The slot may come while the wave's flush is still under way (from
	// its Join); the wave's deadline is armed only once the flush is done.
	<-m.wave.Done()
	s.queued.Add(-1)
	if m.tenant != nil {
		s.tenants.Granted(m.tenant, m.req)
	}
	m.granted = time.Now()
	defer m.deadline.finish()
	defer func() { s.release(m, err) }()
	if m.ctx.Err() != nil {
		return m.ctx.Err() // a departed client whose slot raced in
	}
	callCtx, cancel := context.WithCancelCause(m.ctx)
	defer cancel(nil)
	m.cancel = cancel
	if !m.move(granted, calling) || m.deadline.passed() {
		return ErrDeadline // the slot and the deadline were both in when we looked
	}
	if err := s.waitHold(callCtx, m); err != nil {
		return deadlineOr(callCtx, err)
	}
	if err := s.released(m); err != nil {
		return err
	}
	m.granted = time.Now() // the hold counts as waiting
	m.heldFrom = m.granted
	if s.hooks.Started != nil {
		s.hooks.Started(m.ctx, m)
	}
	return deadlineOr(callCtx, m.call(callCtx))
}

// deadlineOr is ErrDeadline if the deadline cut ctx short, else err.
func deadlineOr(ctx context.Context, err error) error {
	if err != nil && context.Cause(ctx) == ErrDeadline {
		return ErrDeadline
	}
	return err
}

// call calls m's function, turning a panic into a *PanicError so that one
// member's panic touches no other member.
func (m *Member) call(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return m.fn(ctx, m)
}

// waitHold waits, holding the slot, until the admission's hold for m has
// passed or ctx ends. It looks again after each wait, since an answer that
// came in meanwhile may have moved the hold.
func (s *Scheduler) waitHold(ctx context.Context, m *Member) error {
	for {
		until := s.admission.HoldUntil(m.req)
		if until.IsZero() {
			return nil // no hold: not even a look at the clock
		}
		d := time.Until(until)
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

// released asks the admissions that look again at a release (Recheck)
// whether m, which holds its slot, may now make its call: nil, or the
// first refusal, after which m's slot goes back telling the gate nothing.
func (s *Scheduler) released(m *Member) error {
	for _, rc := range s.recheck {
		if err := rc.Recheck(m.req); err != nil {
			m.refused, m.heldFrom = true, time.Time{} // no call: no service time either
			return err
		}
	}
	return nil
}

// release gives m's slot back, telling the gate how its use went (err is
// fn's), and feeds the service-time average.
func (s *Scheduler) release(m *Member, err error) {
	now := time.Now()
	if s.hooks.Started != nil {
		m.released = now
	}
	s.gate.Release(&m.ticket, m.outcome(now, err))
	if m.tenant != nil {
		s.tenants.Done(m.tenant)
	}
	if !m.heldFrom.IsZero() { // zero: it left before its call began
		s.service.observe(now.Sub(m.heldFrom))
	}
}
