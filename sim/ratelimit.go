package sim

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// bucket is a token bucket holding up to limit, refilled continuously at
// limit per minute.
type bucket struct {
	limit float64
	level float64
	last  time.Time
}

// newBucket is a bucket of limit a minute, spent of it already (a share).
func newBucket(limit int, spent float64, now time.Time) *bucket {
	if limit <= 0 {
		return nil
	}
	return &bucket{limit: float64(limit), level: float64(limit) * (1 - min(max(spent, 0), 1)), last: now}
}

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.last); dt > 0 {
		b.level = math.Min(b.limit, b.level+b.limit*dt.Minutes())
		b.last = now
	}
}

// waitFor is how long until the bucket holds n (capped at its limit, so a
// request larger than the limit waits for a full bucket, not forever).
func (b *bucket) waitFor(n float64) time.Duration {
	n = math.Min(n, b.limit)
	if b.level >= n {
		return 0
	}
	return time.Duration((n - b.level) / b.limit * float64(time.Minute))
}

func (b *bucket) untilFull() time.Duration { return b.waitFor(b.limit) }

// orgLimits is the rate limits of every credential: each API key stands
// for an organisation of its own, with its own buckets, as keys of
// different organisations have on the API (keys of one organisation share
// them there; the simulator has no organisations).
type orgLimits struct {
	cfg  Config
	mu   sync.Mutex
	keys map[string]*rateLimits
}

// maxOrgs bounds the credentials the simulator keeps buckets for; past
// it, every new credential shares one set.
const maxOrgs = 1024

func newOrgLimits(c Config) *orgLimits { return &orgLimits{cfg: c, keys: map[string]*rateLimits{}} }

// of is the buckets of the credential r carries (x-api-key, or a bearer
// token).
func (o *orgLimits) of(r *http.Request) *rateLimits {
	key := r.Header.Get("X-Api-Key")
	if key == "" {
		key = r.Header.Get("Authorization")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.keys[key]
	if l == nil {
		if len(o.keys) >= maxOrgs {
			key = "\x00overflow"
			if l = o.keys[key]; l != nil {
				return l
			}
		}
		l = newRateLimits(o.cfg)
		o.keys[key] = l
	}
	return l
}

// reset refills every bucket (POST /sim/reset).
func (o *orgLimits) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.keys)
}

// rateLimits holds the requests, input-token and output-token buckets; a
// nil bucket is a limit that is off.
type rateLimits struct {
	mu            sync.Mutex
	req, in, out  *bucket
	rpm, itp, otp int
	spent         float64 // the share spent when they were made
}

func newRateLimits(c Config) *rateLimits {
	l := &rateLimits{rpm: c.RequestsPerMinute, itp: c.InputTokensPerMinute, otp: c.OutputTokensPerMinute, spent: c.BucketsSpent}
	l.reset(time.Now())
	return l
}

func (l *rateLimits) reset(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.req, l.in, l.out = newBucket(l.rpm, l.spent, now), newBucket(l.itp, l.spent, now), newBucket(l.otp, l.spent, now)
}

// admit takes one request, in input tokens and out output tokens from the
// buckets, or, if any bucket is short, takes nothing and says how long until
// the request would fit.
func (l *rateLimits) admit(now time.Time, in, out int) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait time.Duration
	need := []struct {
		b *bucket
		n float64
	}{{l.req, 1}, {l.in, float64(in)}, {l.out, float64(out)}}
	for _, x := range need {
		if x.b == nil {
			continue
		}
		x.b.refill(now)
		wait = max(wait, x.b.waitFor(x.n))
	}
	if wait > 0 {
		return wait, false
	}
	for _, x := range need {
		if x.b != nil {
			x.b.level -= math.Min(x.n, x.b.limit)
		}
	}
	return 0, true
}

// giveOutput returns n output tokens to the output bucket: what an answer
// that has ended did not use of the max_tokens it was debited.
func (l *rateLimits) giveOutput(n int) {
	if n <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.out; b != nil {
		b.refill(time.Now())
		b.level = math.Min(b.limit, b.level+float64(n))
	}
}

// writeHeaders sets the anthropic-ratelimit-* headers from the buckets'
// state at now. The tokens-* family reports the tighter of input and output.
func (l *rateLimits) writeHeaders(h http.Header, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	set := func(name string, b *bucket, tokens bool) {
		if b == nil {
			return
		}
		b.refill(now)
		rem := int64(math.Floor(b.level))
		if tokens {
			rem = int64(math.Round(b.level/1000)) * 1000
		}
		h.Set("anthropic-ratelimit-"+name+"-limit", strconv.FormatInt(int64(b.limit), 10))
		h.Set("anthropic-ratelimit-"+name+"-remaining", strconv.FormatInt(rem, 10))
		h.Set("anthropic-ratelimit-"+name+"-reset", now.Add(b.untilFull()).UTC().Format(time.RFC3339))
	}
	set("requests", l.req, false)
	set("input-tokens", l.in, true)
	set("output-tokens", l.out, true)
	tight := l.in
	if tight == nil || (l.out != nil && l.out.level < tight.level) {
		tight = l.out
	}
	set("tokens", tight, true)
}

// InputTokenBucket is the input-token bucket of the most spent credential
// as it stands now, read without changing it: its level (refilled to now)
// and its size, the input-token limit per minute. A simulator that has
// seen no credential yet reports a new credential's bucket. ok is false
// when there is no input-token limit. It is what a benchmark samples to draw the bucket
// a rate-limited client lives on; with one credential it is that
// credential's bucket.
func (s *Server) InputTokenBucket() (level float64, size int, ok bool) {
	if s.cfg.InputTokensPerMinute <= 0 {
		return 0, 0, false
	}
	size = s.cfg.InputTokensPerMinute
	level = newBucket(size, s.cfg.BucketsSpent, time.Now()).level // as a credential's starts
	now := time.Now()
	o := s.limits
	o.mu.Lock()
	keys := make([]*rateLimits, 0, len(o.keys))
	for _, l := range o.keys {
		keys = append(keys, l)
	}
	o.mu.Unlock()
	for _, l := range keys {
		l.mu.Lock()
		if b := l.in; b != nil {
			v := b.level
			if dt := now.Sub(b.last); dt > 0 {
				v = math.Min(b.limit, v+b.limit*dt.Minutes())
			}
			level = math.Min(level, v)
		}
		l.mu.Unlock()
	}
	return level, size, true
}
