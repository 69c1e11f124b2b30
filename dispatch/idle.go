package dispatch

import (
	"time"

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

// releaseIfIdle closes wave, the window m just joined, if nothing would
// make its members wait.
func (s *Scheduler) releaseIfIdle(m *Member, wave *window.Wave[*Member]) {
	if !s.idleRelease || !s.idle(m) {
		return
	}
	s.win.FlushEarly(wave)
}

// idle reports whether every member the scheduler holds, m among them,
// would find a free slot with nobody ahead of it, and m's admission holds
// nothing back.
func (s *Scheduler) idle(m *Member) bool {
	st := s.gate.Stats()
	if st.Waiting > 0 {
		return false
	}
	// queued counts the open window, waves not yet in line (held cache
	// followers) and the line; a member granted a moment ago may still be
	// counted here and in InFlight, which errs towards waiting.
	if s.queued.Load() > int64(st.Capacity-st.InFlight) {
		return false
	}
	if until := s.admission.HoldUntil(m.req); !until.IsZero() && time.Until(until) > 0 {
		return false // a spent rate limit: the window's wait costs nothing
	}
	if s.pacing != nil && s.pacing.Holds(m.req) {
		return false // its key's rate limit would hold it anyway
	}
	return true
}
