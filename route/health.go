package route

import (
	"sync"
	"time"
)

// A key's health: a key (or a whole backend) that fails is skipped for a
// short time that grows with each failure in a row, then tried again;
// one success makes it healthy.

const (
	// firstSkip is how long a key is skipped after one failure; it
	// doubles with each failure in a row, up to maxSkip.
	firstSkip = 500 * time.Millisecond
	maxSkip   = 30 * time.Second
)

type health struct {
	mu    sync.Mutex
	fails int       // failures in a row
	until time.Time // skipped until then
	// probing is until when a request sent to the key once its skip
	// ended is its probe: one at a time, so that a whole wave is not sent
	// to a key that may still be failing. A probe that never reports (its
	// client left) frees the key for another after probeWindow.
	probing time.Time
}

// probeWindow bounds how long a probe holds a failing key for itself.
const probeWindow = 10 * time.Second

// Outcome is how an upstream call on a key went, as its health sees it.
type Outcome uint8

const (
	// Answered: an answer that says nothing against the key (a 2xx, a 4xx;
	// a 429 is the buckets' business, not its health's).
	Answered Outcome = iota
	// Overloaded: a 529 or another 5xx.
	Overloaded
	// Unreachable: no answer at all (the connection failed): its whole
	// backend is skipped.
	Unreachable
)

// OutcomeOf is the outcome of an answer with status (0: none came).
// A 401 is the upstream refusing the key itself (revoked, mistyped):
// nothing a client can change, so the key is skipped as a failing one. A
// 403 may be about the request alone (a model the organisation may not
// use), and is not held against the key.
func OutcomeOf(status int) Outcome {
	switch {
	case status == 0:
		return Unreachable
	case status >= 500, status == 401:
		return Overloaded
	}
	return Answered
}

// Result tells the pool how a call on k went: a failure skips k (its
// whole backend, when it could not be reached) for a while.
func (p *Pool) Result(k *Key, o Outcome, now time.Time) {
	switch o {
	case Answered:
		if k.health.ok() {
			p.tellHealth(k, 0, time.Time{})
		}
		return
	case Unreachable:
		for _, kk := range k.Backend.Keys {
			fails, until := kk.health.fail(now)
			p.tellHealth(kk, fails, until)
		}
	default:
		fails, until := k.health.fail(now)
		p.tellHealth(k, fails, until)
	}
	k.count.failures.Add(1)
}

// ok makes h healthy; it reports whether it was not.
func (h *health) ok() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.fails > 0
	h.fails, h.until, h.probing = 0, time.Time{}, time.Time{}
	return was
}

// fail counts a failure at now; it returns the failures in a row and
// the end of the skip. A failure while the key is skipped (a call that
// was in flight when the skip began, or one sent when every key was
// skipped) says nothing new: the skip grows only when the key fails again
// once tried again, so a burst of concurrent failures skips it once.
func (h *health) fail(now time.Time) (int, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if now.Before(h.until) {
		return h.fails, h.until
	}
	skip := firstSkip << min(h.fails, 10)
	h.fails++
	h.until = now.Add(min(skip, maxSkip))
	h.probing = time.Time{}
	return h.fails, h.until
}

// usable reports whether a request may be sent to the key at now: it is
// healthy, or its skip is over and no probe is out.
func (h *health) usable(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fails == 0 || !now.Before(h.until) && !now.Before(h.probing)
}

// sent notes a request routed to the key at now: if the key is failing,
// that request is its probe.
func (h *health) sent(now time.Time) {
	h.mu.Lock()
	if h.fails > 0 {
		h.probing = now.Add(probeWindow)
	}
	h.mu.Unlock()
}

// set takes what another replica learnt: a later skip, or a recovery.
func (h *health) set(fails int, until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case fails == 0:
		h.fails, h.until = 0, time.Time{}
	case until.After(h.until):
		h.fails, h.until = max(h.fails, fails), until
	}
}

// skippedUntil is when k may be tried again; zero or past: now.
func (h *health) skippedUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.until
}

// Healthy reports whether k is tried now: it is not failing, or its skip
// is over and no probe of it is out.
func (k *Key) Healthy(now time.Time) bool { return k.health.usable(now) }
