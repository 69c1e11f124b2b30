package dispatch

import (
	"errors"
	"sync/atomic"
	"time"
)

// ErrDeadline is returned when a member's wave deadline passed before its
// function finished (or, for a member that lifted the deadline, before it
// did so).
var ErrDeadline = errors.New("dispatch: wave deadline passed")

// waveDeadline is shared by all members of a wave: one timer a wave, not one
// a member, and no context of its own, so that a member costs no allocation
// for it.
type waveDeadline struct {
	timeout time.Duration
	members []*Member
	timer   *time.Timer
	live    atomic.Int32 // members not yet finished; the last stops the timer
	over    atomic.Bool  // set as the deadline passes, before the sweep
}

// arm starts the deadline's timer, counted from the wave's close; call it
// once the wave's members are released.
func (d *waveDeadline) arm(closedAt time.Time) {
	if due := time.Until(closedAt.Add(d.timeout)); due > 0 {
		d.timer = time.AfterFunc(due, d.expire)
	} else {
		d.expire() // the flush itself took longer than the timeout
	}
}

// expire runs when the deadline passes: members still waiting leave with
// ErrDeadline, and those holding a slot that have not lifted the deadline
// are cut off. over is set first, so that a member moving to calling or
// lifted while the sweep is under way (a slot freed by the sweep itself,
// say) sees it after its move, and is cut off all the same.
func (d *waveDeadline) expire() {
	d.over.Store(true)
	for _, m := range d.members {
		switch {
		case m.move(flushed, leaving), m.move(inLine, leaving):
			go m.quitWaiting(ErrDeadline)
		case m.move(granted, cutOff):
			// serve finds it so, and calls nothing
		case m.move(calling, cutOff):
			m.cancel(ErrDeadline)
		}
	}
}

// passed reports whether the deadline has passed.
func (d *waveDeadline) passed() bool { return d.over.Load() }

// finish marks one member of the wave done; the last one stops the timer.
func (d *waveDeadline) finish() {
	if d.live.Add(-1) == 0 && d.timer != nil {
		d.timer.Stop()
	}
}
