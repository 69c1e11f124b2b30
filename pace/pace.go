// Package pace models the upstream's rate limits from its
// anthropic-ratelimit-* headers. Buckets estimates each upstream key's
// token buckets, so that a request is sent once its cost fits (see
// buckets.go); Pacer is the older, coarser model, which says until when
// every call should be held once a limit reads exhausted.
package pace

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/retry"
)

// kinds are the limits the API reports, as in
// anthropic-ratelimit-{kind}-{remaining,reset}.
var kinds = []string{"requests", "tokens", "input-tokens", "output-tokens"}

// Pacer remembers the latest time until which calls should be held. The
// zero value holds nothing and is ready to use; it is safe for concurrent
// use.
type Pacer struct {
	// MaxHold caps one hold, so that a skewed clock or a far-off reset
	// cannot stall sluice for long; the wave deadline still applies to each
	// request. If zero, 60 s.
	MaxHold time.Duration

	mu    sync.Mutex
	until time.Time
}

// Observe reads one upstream response's status and headers: an exhausted
// limit holds calls until its reset, and a 429 with retry-after holds them
// for that long.
func (p *Pacer) Observe(status int, h http.Header) {
	now := time.Now()
	var until time.Time
	for _, k := range kinds {
		rem := h.Get("Anthropic-Ratelimit-" + k + "-Remaining")
		if rem == "" {
			continue
		}
		if n, err := strconv.ParseInt(rem, 10, 64); err != nil || n > 0 {
			continue
		}
		reset, err := time.Parse(time.RFC3339, h.Get("Anthropic-Ratelimit-"+k+"-Reset"))
		if err == nil && reset.After(until) {
			until = reset
		}
	}
	if status == http.StatusTooManyRequests {
		if d, ok := retry.After(h, now); ok && d > 0 {
			if t := now.Add(d); t.After(until) {
				until = t
			}
		}
	}
	if !until.After(now) {
		return
	}
	maxHold := p.MaxHold
	if maxHold == 0 {
		maxHold = time.Minute
	}
	if limit := now.Add(maxHold); until.After(limit) {
		until = limit
	}
	p.mu.Lock()
	if until.After(p.until) {
		p.until = until
	}
	p.mu.Unlock()
}

// Until is the time before which no new call should start; a time in the
// past means none is held.
func (p *Pacer) Until() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.until
}
