package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/window"
)

// Idle release (Config.IdleRelease). A window's wait buys order and
// grouping only when its members would otherwise contend: under light load,
// with every slot free, it is pure delay. So when a member joins and
// nothing would make its window's members wait once released (nobody in
// line at the gate, everyone the scheduler still holds (this window's
// members among them) fits in the free slots, and the admission holds
// nobody back), the window closes at once: MaxWait becomes a maximum wait.
// A burst larger than the free slots still forms windows as before, since
// the first member that finds too few free slots leaves its window open.
//
// Cache-aware grouping does not need the window to stay open: the
// cache-aware release (package cacheaware) keeps its groups in a
// registry, not in a wave, so a leader released alone is registered, and
// a later request on its prefix, in whatever wave, is
// held as its follower until its response begins. Held followers count as
// queued, so while one is held later requests see a busier scheduler and
// wait out their window, as without idle release.
//
// The look costs one gate.Stats (cheap by the gate's contract), one load of
// the scheduler's own queued count and one HoldUntil; no I/O.

// releaseIfIdle closes wave, the window a member just joined, if nothing
// would make its members wait; heldBack is what the member's own request
// said (see heldBack), asked before it joined.
func (s *Scheduler) releaseIfIdle(heldBack bool, wave *window.Wave[*Member]) {
	if !s.idleRelease || heldBack || !s.idle() {
		return
	}
	s.win.FlushEarly(wave)
}

// heldBack reports whether r's admission or its key's pacing would hold
// it now. It is asked before r's member joins a window: once there,
// another request's flush may route it, writing r (its key) as this reads.
func (s *Scheduler) heldBack(r *request.Descriptor) bool {
	if !s.idleRelease {
		return false
	}
	if until := s.admission.HoldUntil(r); !until.IsZero() && time.Until(until) > 0 {
		return true // a spent rate limit: the window's wait costs nothing
	}
	return s.pacing != nil && s.pacing.Holds(r) // its key's rate limit would hold it anyway
}

// idle reports whether every member the scheduler holds, the one that
// just joined among them, would find a free slot with nobody ahead of it.
func (s *Scheduler) idle() bool {
	st := s.gate.Stats()
	if st.Waiting > 0 {
		return false
	}
	// queued counts the open window, waves not yet in line (held cache
	// followers) and the line; a member granted a moment ago may still be
	// counted here and in InFlight, which errs towards waiting.
	return s.queued.Load() <= int64(st.Capacity-st.InFlight)
}
