// Package pacetest checks that a store of upstream keys' rate-limit
// buckets learns from an answer's headers as pace.Buckets documents: the
// in-process pace.Buckets and one that replicas share (redisshare.Buckets)
// run the same cases, so that the two cannot drift apart.
package pacetest

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pace"
)

// Store is what the cases call of a store: pace.Buckets' methods.
type Store interface {
	Take(key string, c pace.Cost, now time.Time) (pace.Debit, bool, time.Time)
	Refund(d pace.Debit, now time.Time)
	Correct(d pace.Debit, spent pace.Cost, now time.Time)
	Observe(key string, d pace.Debit, status int, h http.Header, now time.Time)
	Levels(now time.Time) []pace.Level
}

// Env is one fresh store and the clock its refill is reckoned by.
type Env struct {
	Store Store
	// Now is the store's time; Advance moves it on by d.
	Now     func() time.Time
	Advance func(d time.Duration)
	// Real reports that the store's clock also runs on its own (a
	// server's, moved on by Advance): a level may then be above the one
	// expected by what the real time elapsed in the case has refilled.
	Real bool
}

// Virtual is an Env of s on a clock that moves only by Advance.
func Virtual(s Store) Env {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	return Env{Store: s, Now: func() time.Time { return now }, Advance: func(d time.Duration) { now = now.Add(d) }}
}

// Run runs every case against a fresh Env from newEnv.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	t.Helper()
	tests := []struct {
		name string
		run  func(c *check)
	}{
		{"HeadersKeepWhatWasGivenBackSinceTheirRequestWasAdmitted", testHeadersKeepWhatWasGivenBack},
		{"HeadersKeepTheRefillSinceTheirRequestWasAdmitted", testHeadersKeepTheRefill},
		{"HeadersDoNotRaiseTheEstimate", testHeadersDoNotRaiseTheEstimate},
		{"ARefusalsHeadersDoNotCountItsDebitTwice", testARefusalsHeadersDoNotCountItsDebitTwice},
		{"AKnownBucketsRefusalDoesNotCountItsDebitTwice", testAKnownBucketsRefusal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newEnv(t)
			tt.run(&check{T: t, Env: env, start: time.Now()})
		})
	}
}

// clockSkew bounds how far a real store's clock may run ahead of this
// process's between two readings.
const clockSkew = 100 * time.Millisecond

// check is one case's store and clock.
type check struct {
	*testing.T
	Env
	start time.Time // real time
}

func (c *check) take(key string, cost pace.Cost) pace.Debit {
	c.Helper()
	d, ok, _ := c.Store.Take(key, cost, c.Now())
	if !ok {
		c.Fatalf("Take(%q, %+v) refused", key, cost)
	}
	return d
}

// level is key's bucket of kind now, and its limit.
func (c *check) level(key string, kind pace.Kind) (level, limit float64) {
	c.Helper()
	for _, l := range c.Store.Levels(c.Now()) {
		if l.Key == key && l.Kind == kind {
			return l.Level, l.Limit
		}
	}
	c.Fatalf("no %s bucket for %q", kind, key)
	return 0, 0
}

// wantLevel checks key's bucket of kind holds want (on a real clock, up
// to what the real time since the case began refilled on top).
func (c *check) wantLevel(key string, kind pace.Kind, want float64, why string) {
	c.Helper()
	got, limit := c.level(key, kind)
	slop := 1e-6
	if c.Real {
		// What real time refilled, and 100 ms more: the store's clock
		// (Redis's, cached between its commands) and this one are read at
		// different moments (seen: 10 ms, 0.4 tokens, on a loaded machine).
		slop += limit * (time.Since(c.start) + clockSkew).Minutes()
	}
	if got < want-1e-6 || got > want+slop {
		c.Errorf("%s bucket %v; want %v (%s)", kind, got, want, why)
	}
}

// outputHeaders are the headers of an output-token limit of limit a
// minute with remaining left when the upstream admitted the request.
func outputHeaders(limit, remaining int) http.Header {
	h := http.Header{}
	h.Set("anthropic-ratelimit-output-tokens-limit", strconv.Itoa(limit))
	h.Set("anthropic-ratelimit-output-tokens-remaining", strconv.Itoa(remaining))
	return h
}

// InputHeaders are the headers of an input-token limit and a requests
// limit, each of limit a minute with what remains of it.
func InputHeaders(reqLimit, reqRem, inLimit, inRem int) http.Header {
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-limit", strconv.Itoa(reqLimit))
	h.Set("anthropic-ratelimit-requests-remaining", strconv.Itoa(reqRem))
	h.Set("anthropic-ratelimit-input-tokens-limit", strconv.Itoa(inLimit))
	h.Set("anthropic-ratelimit-input-tokens-remaining", strconv.Itoa(inRem))
	return h
}

// An answer's headers were made when the upstream admitted its request:
// what other requests gave back since (the unused part of their
// max_tokens) they have not seen, and the estimate keeps it.
func testHeadersKeepWhatWasGivenBack(c *check) {
	s := c.Store
	s.Observe("k", pace.Debit{}, 200, outputHeaders(2400, 2400), c.Now()) // exact: not a round thousand
	d1 := c.take("k", pace.Cost{Output: 1024})
	d2 := c.take("k", pace.Cost{Output: 1024})
	s.Correct(d1, pace.Cost{Output: 55}, c.Now()) // d1 ends first: 969 come back
	// d2's headers, made when it was admitted: 352 left, rounded to 0.
	s.Observe("k", d2, 200, outputHeaders(2400, 0), c.Now())
	c.wantLevel("k", pace.OutputTokens, 352+969, "d1's refund kept: d2's headers cannot have seen it")
}

// Nor have they seen what refilled since: a whole JSON answer brings its
// headers at its end.
func testHeadersKeepTheRefill(c *check) {
	s := c.Store
	s.Observe("k", pace.Debit{}, 200, outputHeaders(2400, 2400), c.Now())
	d := c.take("k", pace.Cost{Output: 2400})
	c.Advance(30 * time.Second) // half the bucket has refilled
	s.Observe("k", d, 200, outputHeaders(2400, 0), c.Now())
	c.wantLevel("k", pace.OutputTokens, 1200, "the refill since the headers were made kept")
}

// Requests in flight together reach the upstream in any order, so an
// answer's headers may have seen requests debited before its own: the
// estimate is never raised to what they say remains.
func testHeadersDoNotRaiseTheEstimate(c *check) {
	s := c.Store
	s.Observe("k", pace.Debit{}, 200, InputHeaders(1000, 1000, 60000, 60000), c.Now())
	c.take("k", pace.Cost{Input: 30000}) // d1
	d2 := c.take("k", pace.Cost{Input: 30000})
	// The upstream admitted d2 first, with 30,000 left after it, and d1
	// then, with none; d2's answer comes first.
	s.Observe("k", d2, 200, InputHeaders(1000, 999, 60000, 30000), c.Now())
	if _, ok, _ := s.Take("k", pace.Cost{Input: 20000}, c.Now()); ok {
		got, _ := c.level("k", pace.InputTokens)
		c.Errorf("20,000 fitted after d2's headers (estimate %v); the bucket is empty", got)
	}
}

// A refusal's headers have not seen its request's debit, which is given
// back after them: it is not counted twice.
func testARefusalsHeadersDoNotCountItsDebitTwice(c *check) {
	s := c.Store
	d := c.take("k", pace.Cost{Output: 512}) // the key's limits not known yet
	s.Observe("k", d, http.StatusTooManyRequests, outputHeaders(8000, 33), c.Now())
	s.Refund(d, c.Now())
	c.wantLevel("k", pace.OutputTokens, 33, "a 429 with 33 left, and its refund")
}

// Nor when the bucket was known before the refusal.
func testAKnownBucketsRefusal(c *check) {
	s := c.Store
	s.Observe("k", pace.Debit{}, 200, outputHeaders(8000, 8000), c.Now())
	d := c.take("k", pace.Cost{Output: 8000})
	s.Observe("k", d, http.StatusTooManyRequests, outputHeaders(8000, 33), c.Now())
	s.Refund(d, c.Now())
	c.wantLevel("k", pace.OutputTokens, 33, "a known bucket after a 429 with 33 left, and its refund")
}
