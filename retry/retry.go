// Package retry decides whether and when a failed upstream call is tried
// again: which answers are retryable, the backoff between attempts (the
// official SDKs' schedule, so sluice retrying in place behaves like a client
// would), the wait the upstream asked for, and a budget that stops retries
// from amplifying an outage.
package retry

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cause names why an attempt is retried; it is a metrics label.
type Cause string

// CauseConnection is a failure to get a response at all.
const CauseConnection Cause = "connection"

// Retryable reports whether an upstream answer with this status and header
// may be retried, and the cause to record. x-should-retry: false vetoes a
// retry; other 4xx than 429 are never retried, whatever the header says,
// because the same request would fail the same way.
func Retryable(status int, h http.Header) (Cause, bool) {
	should := strings.ToLower(strings.TrimSpace(h.Get("X-Should-Retry")))
	if should == "false" {
		return "", false
	}
	switch status {
	case http.StatusTooManyRequests, 529, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return Cause(strconv.Itoa(status)), true
	}
	if should == "true" && status >= 500 {
		return Cause(strconv.Itoa(status)), true
	}
	return "", false
}

// Backoff is the wait before retry n (0 for the first retry):
// min(0.5s * 2^n, 8s), less up to 25% jitter. rnd is a number in [0, 1).
func Backoff(n int, rnd float64) time.Duration {
	d := 8 * time.Second
	if n < 4 {
		d = 500 * time.Millisecond << n
	}
	return d - time.Duration(float64(d)*0.25*rnd)
}

// MaxAfter caps the wait After reads: a larger (or infinite) retry-after
// would overflow a Duration into a negative wait, that is none at all.
const MaxAfter = 24 * time.Hour

// After is the wait the upstream asked for in h: retry-after-ms first, then
// retry-after in seconds or as an HTTP date, at most MaxAfter. ok is false
// when neither is present and valid.
func After(h http.Header, now time.Time) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(min(ms, float64(MaxAfter/time.Millisecond)) * float64(time.Millisecond)), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(min(s, MaxAfter.Seconds()) * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// Budget allows retries up to a share of the requests seen over a sliding
// window, and always at least a floor rate, so that a handful of failures
// on a quiet proxy are still retried while an outage under load is not
// multiplied by the retry count. It is safe for concurrent use.
type Budget struct {
	percent  int     // retries allowed per 100 requests
	floor    float64 // retries per second always allowed
	mu       sync.Mutex
	buckets  [budgetBuckets]bucket
	interval time.Duration // one bucket's span
}

type bucket struct {
	start             time.Time
	requests, retries int
}

// budgetBuckets spans the window in whole seconds: ten one-second buckets.
const budgetBuckets = 10

// NewBudget returns a budget of percent retries per 100 requests over the
// last 10 seconds, never less than floor retries per second. percent 0 with
// floor 0 allows no retries.
func NewBudget(percent int, floor float64) *Budget {
	return &Budget{percent: percent, floor: floor, interval: time.Second}
}

// Request records one request (a first attempt).
func (b *Budget) Request() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.current(time.Now()).requests++
}

// Spend takes one retry from the budget, reporting false when it is spent.
func (b *Budget) Spend() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	cur := b.current(now)
	var requests, retries int
	for i := range b.buckets {
		if now.Sub(b.buckets[i].start) < budgetBuckets*b.interval {
			requests += b.buckets[i].requests
			retries += b.buckets[i].retries
		}
	}
	allowed := max(float64(requests)*float64(b.percent)/100, b.floor*budgetBuckets)
	if float64(retries) >= allowed {
		return false
	}
	cur.retries++
	return true
}

// current is the bucket for now, emptied if it last served an older span.
// b.mu is held.
func (b *Budget) current(now time.Time) *bucket {
	start := now.Truncate(b.interval)
	bk := &b.buckets[(start.UnixNano()/int64(b.interval))%budgetBuckets]
	if !bk.start.Equal(start) {
		*bk = bucket{start: start}
	}
	return bk
}
