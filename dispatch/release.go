package dispatch

import "github.com/sluicehq/sluice/window"

// Releaser puts the members of each closed wave in line at the gate. It is
// given the wave and join, and must call join for each member exactly once,
// now or later (on the member's own schedule: when another member's
// response has Begun, say). It runs on the flush path and must not block.
// A member that leaves (its client gone, its deadline passed) before its
// join is simply not put in line; join may still be called for it.
type Releaser interface {
	Release(w *window.Wave[*Member], join func(*Member))
}

// InOrder puts all of a wave's members in line at once, in arrival order.
type InOrder struct{}

var _ Releaser = InOrder{}

// Release joins every member of w now.
func (InOrder) Release(w *window.Wave[*Member], join func(*Member)) {
	for _, m := range w.Items {
		join(m)
	}
}

// flush is the window closing a wave: its members come under a deadline
// and go to the releaser.
func (s *Scheduler) flush(w *window.Wave[*Member]) {
	if s.hooks.Flushed != nil {
		s.hooks.Flushed(w.ID, len(w.Items), w.Reason)
	}
	d := &waveDeadline{timeout: s.timeout, members: w.Items}
	d.live.Store(int32(len(w.Items)))
	for _, m := range w.Items {
		m.wave, m.deadline = w, d
		m.move(inWindow, flushed)
		// A client that left while its wave was closing found it in
		// neither window nor line (see depart); look again now.
		if m.ctx.Err() != nil && m.move(flushed, leaving) {
			go m.quitWaiting(m.ctx.Err())
		}
	}
	s.releaser.Release(w, s.enter)
	// Members read d.timer only after the wave is done, that is after flush
	// returns.
	d.arm(w.ClosedAt)
}

// enter is where the releaser sends each member: to its routed key, if
// there is a routing, through the pacing, if there is one, to the gate's
// line.
func (s *Scheduler) enter(m *Member) {
	s.route(m)
	if s.pacing == nil {
		s.join(m)
		return
	}
	s.pacing.Pace(m, s.join, func() bool { return m.at(flushed) })
}

// join puts m's ticket in the gate's line, unless m has left already or
// is in line already.
func (s *Scheduler) join(m *Member) {
	if !m.move(flushed, inLine) {
		return
	}
	s.gate.Join(&m.ticket)
	if m.at(leaving) {
		// It left as it joined, and its leave may have come before the
		// Join: take it out again (leaving twice is harmless).
		s.gate.Leave(&m.ticket)
	}
}
