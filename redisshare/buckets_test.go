package redisshare

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/pace/pacetest"
	"github.com/sluicehq/sluice/redisconn"
)

// limits are the headers of a requests limit and an input-token limit.
var limits = pacetest.InputHeaders

// TestBucketsSharedAcrossReplicas: two replicas debit one key's buckets in
// Redis, so together they get its limit, not twice it; a refund on one is
// seen by the other; a correction gives back what was not spent.
func TestBucketsSharedAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	name := redistest.Name()
	a := NewBuckets(redistest.Open(t, srv.URL, redisconn.Options{}), name)
	b := NewBuckets(redistest.Open(t, srv.URL, redisconn.Options{}), name)
	now := time.Now()
	a.Observe("k", pace.Debit{}, 200, limits(10, 10, 100000, 100000), now)
	cost := pace.Cost{Input: 100, Output: 10}
	var debits []pace.Debit
	for i := range 10 {
		r := a
		if i%2 == 1 {
			r = b
		}
		d, ok, _ := r.Take("k", cost, now)
		if !ok {
			t.Fatalf("take %d of 10 refused", i+1)
		}
		if !d.Shared() {
			t.Fatalf("take %d was not shared", i+1)
		}
		debits = append(debits, d)
	}
	if _, ok, at := b.Take("k", cost, now); ok {
		t.Fatal("an 11th request fits in a limit of 10")
	} else if wait := at.Sub(now); wait < 5*time.Second || wait > 7*time.Second {
		t.Fatalf("an 11th request fits in %v, want about 6 s (one request of 10 a minute)", wait)
	}
	if at := b.FitsAt("k", cost, time.Now()); !at.After(time.Now()) { // b took last: its view is the latest
		t.Fatal("FitsAt says a spent key fits")
	}
	b.Refund(debits[0], time.Now())
	if _, ok, _ := a.Take("k", cost, time.Now()); !ok {
		t.Fatal("a refund on one replica is not seen by the other")
	}
	levels := b.Levels(time.Now())
	var sawInput bool
	for _, l := range levels {
		if l.Kind == pace.InputTokens {
			sawInput = true
			if l.Limit != 100000 || l.Level < 100000-1000 || l.Level > 100000-500 {
				t.Fatalf("input level %v of %v after 10 debits of 100 (and under 0.3 s of refill at 1,667 a second)", l.Level, l.Limit)
			}
		}
	}
	if !sawInput {
		t.Fatalf("levels %v lack the input tokens", levels)
	}
	// The answer says 40 of 100 input tokens: 60 come back (the refill
	// between the two readings is a few tokens: 1.7 a millisecond).
	b.Take("k", pace.Cost{Input: 1}, time.Now())
	before := level(b, pace.InputTokens)
	a.Correct(debits[1], pace.Cost{Input: 40, Output: 10}, time.Now())
	b.Take("k", pace.Cost{Input: 1}, time.Now())
	// The lower bound allows a few milliseconds between Redis's clock,
	// which refills the hash, and this process's, which carries a reply's
	// level forward to now: on a loaded machine 5 tokens went that way.
	if after := level(b, pace.InputTokens); after-before < 59-20 || after-before > 59+50 {
		t.Fatalf("input level %v -> %v after a correction of 60 and a debit of 1", before, after)
	}
	// A 429 holds the key on every replica.
	h := limits(10, 0, 100000, 90000)
	h.Set("retry-after", "3")
	a.Observe("k", debits[2], http.StatusTooManyRequests, h, time.Now())
	if _, ok, at := b.Take("k", pace.Cost{Input: 1}, time.Now()); ok || at.Sub(time.Now()) < 2*time.Second {
		t.Fatalf("a 429's retry-after does not hold the other replica: ok %v, fits in %v", ok, at.Sub(time.Now()))
	}
}

func level(b *Buckets, k pace.Kind) float64 {
	for _, l := range b.Levels(time.Now()) {
		if l.Kind == k {
			return l.Level
		}
	}
	return -1
}

// TestBucketsFallback: with Redis gone, each replica takes its share of
// the limits it last learned, from its own buckets, without waiting on
// Redis; when Redis is back the shared buckets resume.
func TestBucketsFallback(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.Open(t, srv.URL, redisconn.Options{Replicas: 2, LeaseTTL: 400 * time.Millisecond})
	b := NewBuckets(c, redistest.Name())
	now := time.Now()
	b.Observe("k", pace.Debit{}, 200, limits(10, 10, 100000, 100000), now)
	srv.Stop()
	start := time.Now()
	got := 0
	for range 10 {
		if d, ok, _ := b.Take("k", pace.Cost{Input: 1}, now); ok {
			got++
			if d.Shared() {
				t.Fatal("a debit is shared with Redis down")
			}
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("10 takes with Redis down took %v", took)
	}
	if b.Shared() {
		t.Fatal("the buckets are still shared with Redis down")
	}
	if got != 5 {
		t.Fatalf("with Redis down one of two replicas took %d of a limit of 10, want its share 5", got)
	}
	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for !b.Shared() {
		if time.Now().After(deadline) {
			t.Fatal("the buckets did not resume within 5 s of Redis coming back")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBucketsConformance runs pace's cases on the shared buckets: an
// answer's headers bound them as they bound pace.Buckets. Time is moved
// on by the scripts' skew, on top of Redis's own clock.
func TestBucketsConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.Open(t, srv.URL, redisconn.Options{})
	pacetest.Run(t, func(t *testing.T) pacetest.Env {
		b := NewBuckets(c, redistest.Name())
		return pacetest.Env{
			Store:   b,
			Now:     func() time.Time { return time.Now().Add(time.Duration(b.skew.Load()) * time.Millisecond) },
			Advance: func(d time.Duration) { b.skew.Add(d.Milliseconds()) },
			Real:    true,
		}
	})
}

// TestBucketsConformanceFallback runs them on the buckets of a replica
// whose Redis never answers: its own pace.Buckets, here with the whole of
// each limit (one replica).
func TestBucketsConformanceFallback(t *testing.T) {
	c := redistest.Open(t, "redis://127.0.0.1:1/0", redisconn.Options{Replicas: 1})
	pacetest.Run(t, func(t *testing.T) pacetest.Env {
		b := NewBuckets(c, redistest.Name())
		return pacetest.Virtual(b)
	})
}
