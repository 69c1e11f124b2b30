package pace

import (
	"container/list"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/retry"
)

// The API's rate limits are token buckets, one per organisation and limit:
// each holds up to its limit and is refilled continuously at the limit per
// minute, so a request fits as soon as the bucket holds its cost, long
// before the *-reset time (when the bucket will be full). Buckets keeps an
// estimate of each upstream key's buckets: learned from the
// anthropic-ratelimit-* headers of every answer, debited by each request
// when it is let go, and corrected from the answer's usage. Its estimate is
// finer than the headers alone, which round token counts to thousands (a
// small limit reads 0 while it still holds hundreds).

// tokenSlack is how far a token count in the headers may be from the
// bucket's level: the API rounds them to thousands (to the nearest, which
// is what the simulator does; were it to round down, the upper bound below
// would err on the safe side and the lower one would still hold).
const tokenSlack = 500

// DefaultMaxKeys bounds the keys Buckets tracks: an upstream key past it
// pushes out the least recently used one, which starts again unknown.
const DefaultMaxKeys = 256

// Buckets estimates the rate-limit buckets of each upstream key. The zero
// value is ready to use and safe for concurrent use.
type Buckets struct {
	// MaxKeys bounds the keys tracked; zero means DefaultMaxKeys.
	MaxKeys int
	// MaxHold caps a hold after a 429's retry-after, so that a far-off
	// value cannot stall a key for long; zero means 60 s.
	MaxHold time.Duration

	mu    sync.Mutex
	share float64                  // SetShare's; 0: the whole of each limit
	keys  map[string]*list.Element // of *keyBuckets
	lru   list.List
}

// keyBuckets is one key's buckets.
type keyBuckets struct {
	key     string
	b       [numKinds]bucket
	spent   [numKinds]float64 // running total of debits, less what was given back
	given   [numKinds]float64 // running total of what was given back
	blocked time.Time         // a 429's retry-after: nothing goes before it
}

// bucket is one limit's estimated state; unknown until a header names it.
type bucket struct {
	known bool
	limit float64
	level float64
	at    time.Time
}

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.at); dt > 0 {
		b.level = math.Min(b.limit, b.level+b.limit*dt.Minutes())
		b.at = now
	}
}

// need is what a request of amount n needs in b: a request larger than the
// whole bucket needs a full bucket, not forever.
func (b *bucket) need(n float64) float64 { return math.Min(n, b.limit) }

// wait is how long until b holds n.
func (b *bucket) wait(n float64) time.Duration {
	if b.level >= n {
		return 0
	}
	return time.Duration(math.Ceil((n - b.level) / b.limit * float64(time.Minute)))
}

// within is c without what could never fit: an amount above its bucket's
// whole size is the upstream's to refuse (the API rejects a max_tokens
// past the model's maximum at once), and holding the request for a full
// bucket would stall every request of its key behind it. That amount is
// neither waited for nor debited; the answer's usage is (Correct).
func (k *keyBuckets) within(c Cost) Cost {
	if b := &k.b[InputTokens]; k.uses(InputTokens) && c.Input > b.limit {
		c.Input = 0
	}
	if b := &k.b[OutputTokens]; k.uses(OutputTokens) && c.Output > b.limit {
		c.Output = 0
	}
	if b := &k.b[Tokens]; k.uses(Tokens) && c.Input+c.Output > b.limit {
		c = Cost{}
	}
	return c
}

// spare is how little forgetting k would lose: 2 when nothing is known of
// it, -1 while a 429's hold is in force, else the share its emptiest
// bucket holds (1: every bucket full).
func (k *keyBuckets) spare(now time.Time) float64 {
	if k.blocked.After(now) {
		return -1
	}
	v := 2.0
	for kind := range numKinds {
		if b := &k.b[kind]; b.known {
			b.refill(now)
			v = min(v, b.level/b.limit)
		}
	}
	return v
}

// fitsAt is when c fits in k's buckets, as far as is known at now.
func (k *keyBuckets) fitsAt(c Cost, now time.Time) time.Time {
	at := now
	if k.blocked.After(at) {
		at = k.blocked
	}
	for kind := range numKinds {
		if !k.uses(kind) {
			continue
		}
		b := &k.b[kind]
		b.refill(now)
		if t := now.Add(b.wait(b.need(c.of(kind)))); t.After(at) {
			at = t
		}
	}
	return at
}

// uses reports which kinds count for k: Tokens only when neither input
// nor output tokens are reported.
func (k *keyBuckets) uses(kind Kind) bool {
	if !k.b[kind].known {
		return false
	}
	return kind != Tokens || (!k.b[InputTokens].known && !k.b[OutputTokens].known)
}

// Take debits c from key's buckets if it fits in every one now, and
// reports true; otherwise it takes nothing and says when it would fit (as
// far as is known now). A key none of whose limits is known yet takes
// anything.
func (bs *Buckets) Take(key string, c Cost, now time.Time) (Debit, bool, time.Time) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	k := bs.get(key)
	c = k.within(c)
	at := k.fitsAt(c, now)
	if at.After(now) {
		return Debit{}, false, at
	}
	d := Debit{Key: key, Cost: c, spent: k.spent, given: k.given, at: now, taken: true}
	for kind := range numKinds {
		n := c.of(kind)
		k.spent[kind] += n
		if k.uses(kind) {
			k.b[kind].level -= k.b[kind].need(n)
		}
	}
	return d, true, now
}

// FitsAt is when c would fit in key's buckets, as far as is known at now
// (now, or earlier, if it fits now); it takes nothing.
func (bs *Buckets) FitsAt(key string, c Cost, now time.Time) time.Time {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	k := bs.lookup(key)
	if k == nil {
		return now
	}
	return k.fitsAt(k.within(c), now) // as Take would reckon it
}

// Refund gives d back in full: its call never reached the upstream, or was
// refused before it was counted.
func (bs *Buckets) Refund(d Debit, now time.Time) { bs.correct(d, Cost{}, true, now) }

// Correct replaces d's estimate by what the answer says was spent.
func (bs *Buckets) Correct(d Debit, spent Cost, now time.Time) { bs.correct(d, spent, false, now) }

func (bs *Buckets) correct(d Debit, spent Cost, refund bool, now time.Time) {
	if !d.taken {
		return
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	k := bs.lookup(d.Key)
	if k == nil {
		return
	}
	for kind := range numKinds {
		diff := d.Cost.of(kind) - spent.of(kind)
		if kind == Requests && refund {
			diff = 1
		}
		if diff != 0 {
			k.give(kind, diff, now)
		}
	}
}

// give adds n (negative: takes) to kind's bucket.
func (k *keyBuckets) give(kind Kind, n float64, now time.Time) {
	k.spent[kind] -= n
	if n > 0 {
		k.given[kind] += n
	}
	if b := &k.b[kind]; k.uses(kind) {
		b.refill(now)
		b.level = math.Min(b.limit, b.level+n)
	}
}

// Observe learns from one answer to a request that took d: the limits and
// what remains of them, and a 429's retry-after, which holds key alone.
// The local estimate is kept below what the headers allow. The headers
// were made when the upstream admitted d's request, which may be long
// before its answer ends (a whole JSON answer brings them at its end): so
// never above what remains plus what was given back and what refilled
// since d was taken (other clients of the organisation spend it too; a
// bound of what remains alone threw away the unused max_tokens that
// other requests gave back since, and held an output-limited key for
// tens of seconds); it is never raised to them (see below).
func (bs *Buckets) Observe(key string, d Debit, status int, h http.Header, now time.Time) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	k := bs.lookup(key)
	if k == nil {
		if status != http.StatusTooManyRequests && !hasLimits(h) {
			return // nothing to learn, and no entry for a key never limited (or made up)
		}
		k = bs.get(key)
	}
	for kind := range numKinds {
		names := &kindHeaders[kind]
		limit, lok := headerInt(h, names.limit)
		rem, rok := headerInt(h, names.remaining)
		if !rok {
			continue
		}
		if !lok || limit <= 0 {
			// A partial set, without the limit: no bucket to model, but
			// one that reads empty holds the key until its reset, as
			// nothing better is known.
			if reset, err := time.Parse(time.RFC3339, headerOf(h, names.reset)); err == nil && rem == 0 {
				bs.block(k, reset, now)
			}
			continue
		}
		b := &k.b[kind]
		slack := 0.0
		if kind != Requests && int64(rem)%1000 == 0 {
			slack = tokenSlack
		}
		if bs.share > 0 {
			limit, rem, slack = limit*bs.share, rem*bs.share, slack*bs.share
		}
		// uncounted is what of d the upstream did not count, which Settle
		// gives back after this: the headers of a refusal have not seen
		// it, so the estimate, which still holds it, is bounded that
		// much lower.
		uncounted := 0.0
		if d.taken && d.Key == key {
			uncounted = d.Uncounted(kind, status)
		}
		hi := math.Min(limit, rem+slack)
		if d.taken && d.Key == key && !d.shared {
			since := max(now.Sub(d.at), 0).Minutes() * limit
			hi = math.Min(limit, rem+slack+since+k.given[kind]-d.given[kind])
		}
		if !b.known {
			// First seen: the rounded count is the best guess (the true
			// one is as likely above it as below), less what was let go
			// after d while the limit was unknown, which the headers
			// cannot have seen; from here on the local estimate is only
			// kept within the bounds.
			level := math.Min(limit, rem) - uncounted
			if d.taken && d.Key == key {
				level -= k.spent[kind] - d.spent[kind] - d.Cost.of(kind)
			}
			*b = bucket{known: true, limit: limit, level: level, at: now}
			continue
		}
		b.limit = limit
		b.refill(now)
		// Only ever lowered: the headers' lower bound, what remains less
		// what was debited since d, is not one when several requests are
		// in flight at once, since one debited before d may reach the
		// upstream after it (a window's flush sends its members in any
		// order): raising the estimate to it sent a 1,024-token request
		// into a 429 (TestBucketsALargeHeadDoesNotHoldAnotherTenants-
		// SmallRequests). A level too low comes back with the refill and
		// the answers' refunds.
		b.level = math.Min(b.level, hi-uncounted)
	}
	if status == http.StatusTooManyRequests {
		wait := time.Second
		if d, ok := retry.After(h, now); ok && d > 0 {
			wait = d
		}
		bs.block(k, now.Add(wait), now)
	}
}

// block holds k until until, or MaxHold from now if that is sooner.
// bs.mu is held.
func (bs *Buckets) block(k *keyBuckets, until, now time.Time) {
	maxHold := bs.MaxHold
	if maxHold <= 0 {
		maxHold = time.Minute
	}
	if limit := now.Add(maxHold); until.After(limit) {
		until = limit
	}
	if until.After(k.blocked) {
		k.blocked = until
	}
}

// SetShare makes bs model share (in (0, 1]) of every limit the headers
// report, from the next answer on: a replica that falls back to its own
// buckets when those it shares with others cannot be reached takes its
// share of the organisation's limits, not all of them.
func (bs *Buckets) SetShare(share float64) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if share <= 0 || share >= 1 {
		share = 0
	}
	bs.share = share
}

// Level is one known bucket of one key, as of now.
type Level struct {
	Key   string
	Kind  Kind
	Limit float64
	Level float64
}

// Levels is every known bucket, for metrics and the live view.
func (bs *Buckets) Levels(now time.Time) []Level {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	var out []Level
	for el := bs.lru.Front(); el != nil; el = el.Next() {
		k := el.Value.(*keyBuckets)
		for kind := range numKinds {
			if !k.uses(kind) {
				continue
			}
			b := &k.b[kind]
			b.refill(now)
			out = append(out, Level{Key: k.key, Kind: kind, Limit: b.limit, Level: b.level})
		}
	}
	return out
}

// get is key's buckets, made if need be. bs.mu is held.
func (bs *Buckets) get(key string) *keyBuckets {
	if k := bs.lookup(key); k != nil {
		return k
	}
	if bs.keys == nil {
		bs.keys = map[string]*list.Element{}
	}
	limit := bs.MaxKeys
	if limit <= 0 {
		limit = DefaultMaxKeys
	}
	for bs.lru.Len() >= limit {
		// The key whose loss costs least goes: one that has learned
		// nothing, else the one whose buckets are fullest (a full bucket
		// forgotten is a full bucket assumed), the least recently used
		// of equals. A key with a spent bucket or a 429's hold is kept,
		// so that keys made up by the thousand cannot make sluice forget
		// it and send its requests into 429s.
		now := time.Now()
		victim, worst := bs.lru.Back(), -2.0
		for el := bs.lru.Back(); el != nil; el = el.Prev() {
			if v := el.Value.(*keyBuckets).spare(now); v > worst {
				victim, worst = el, v
			}
		}
		old := bs.lru.Remove(victim).(*keyBuckets)
		delete(bs.keys, old.key)
	}
	k := &keyBuckets{key: key}
	bs.keys[key] = bs.lru.PushFront(k)
	return k
}

// lookup is key's buckets, nil if unknown. bs.mu is held.
func (bs *Buckets) lookup(key string) *keyBuckets {
	el := bs.keys[key]
	if el == nil {
		return nil
	}
	bs.lru.MoveToFront(el)
	return el.Value.(*keyBuckets)
}
