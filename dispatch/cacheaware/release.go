// Package cacheaware is the cache-aware release (CACHE_AWARE): a
// dispatch.Releaser that sends the first request on a cold prompt prefix
// and holds the others on it, outside the gate, until its response has
// begun, so that they read the cache entry it wrote rather than each write
// their own. It keeps its registry of prefixes, its record of each member
// (a dispatch.Note) and its doubts about what the API caches; it learns
// from each answer's cache reads as a dispatch.Learner; Share shares
// its registry across replicas. It uses only dispatch's exported seams:
// Member.AfterBegun, Unjoined, Arrived, Deadline, ExpectRead.
package cacheaware

import (
	"cmp"
	"container/list"
	"github.com/sluicehq/sluice/dispatch"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/window"
)

// Defaults of Release.
const (
	// DefaultLeaderWait is how long a follower is held, at most, for its
	// leader's response to begin: about the time to first token of a
	// large uncached prompt (prefill runs at thousands of tokens a second,
	// so 5 s covers a prompt of tens of thousands of tokens with room for
	// a queue at the upstream). A leader slower than this is no longer
	// worth waiting for: its followers then go uncached, as without
	// Release, having lost at most this much.
	DefaultLeaderWait = 5 * time.Second
	// DefaultMaxPrefixes bounds the registry: a few hundred KB.
	DefaultMaxPrefixes = 4096
)

// Release is a Releaser that lets concurrent requests sharing a cached
// prompt prefix pay for it once. The API creates a cache entry only once
// the first response carrying the prefix has begun, so requests sent
// together all write the same prefix, at 1.25 times the input price, and
// all wait for its full prefill. Release sends the first request of a
// cold prefix (the leader) at once and holds the later ones (followers),
// outside the gate, until the leader's response has begun; they then read
// the entry, at 0.1 times the price and with a shorter prefill.
//
// A registry, not a wave, keeps the prefixes: one whose leader has not
// begun holds every later request on it, whatever its wave; one whose
// leader began is warm for its TTL (refreshed on each hit, as the API does)
// and lets requests go at once. A leader that ends without an answer (it
// failed, was cut off or its client left) promotes its first remaining
// follower. A leader whose attempt failed and that is being retried
// (Requeue) has not ended: its followers stay held for its retry, since
// under the overload that failed it they would fail alike. No follower is
// held longer than LeaderWait, nor so long that less than LeaderWait is
// left of its wave deadline or its client's patience: past that it goes
// uncached, as without Release.
//
// A request's prefixes are those at or above its model's minimum
// cacheable length (request.CacheMinimum); one without any is put in line
// at once, as by InOrder. Of a request's prefixes it follows the longest
// one the registry knows (it reads the most), and it leads every one the
// registry does not: so sessions that share a system prompt but each end
// in their own message group on the system prompt, and a later request
// repeating one session's messages groups on those.
//
// A held follower costs a record in its prefix's list, and each prefix
// with held followers one timer: no goroutine. The zero value is ready to
// use; it must not be copied after first use.
type Release struct {
	// LeaderWait bounds how long a follower is held. If zero,
	// DefaultLeaderWait.
	LeaderWait time.Duration
	// MaxPrefixes bounds the registry; past it the least recently used
	// prefix is dropped (its held followers go at once, uncached). If
	// zero, DefaultMaxPrefixes.
	MaxPrefixes int
	// Grouped, if set, is called each time a leader gets its first held
	// follower: a group has formed. It must be quick.
	Grouped func()
	// Share, if set, shares the registry's cold and warm prefixes with
	// other replicas, so that a follower here waits for a leader in
	// flight on another replica too (see Share). Set it before the
	// first Release.
	Share Share
	// DoubtGroups is how many groups in a row whose held followers read
	// none of their prefix (their usage's cache_read_input_tokens) make
	// it stop holding on that prefix, for DoubtCoolOff or until a request
	// is seen to read it: a wrong belief about what the API caches then
	// costs a few groups' holds, not every group's. If zero,
	// DefaultDoubtGroups.
	DoubtGroups int
	// DoubtCoolOff is how long a prefix is not held on; after it one more
	// group may form, and if it reads nothing either the prefix is not
	// held on for another DoubtCoolOff. If zero, DefaultDoubtCoolOff.
	DoubtCoolOff time.Duration
	// Doubted, if set, is told each time a prefix stops being held on or
	// is held on again. It must be quick.
	Doubted func(Doubt)

	listen  sync.Once
	mu      sync.Mutex
	entries map[uint64]*list.Element // of *prefixEntry
	lru     list.List                // most recently used first
	seq     uint64
	doubts  map[uint64]*doubt // see cachedoubt.go; at most MaxPrefixes
}

var (
	_ dispatch.Releaser = (*Release)(nil)
	_ dispatch.Learner  = (*Release)(nil)
)

// lead is a member put in line as the leader of some prefixes: once its
// response begins they turn warm, or are handed to a follower.
type lead struct {
	m   *dispatch.Member
	led []*prefixEntry
}

// release is what one pass over the registry puts in line, done once its
// lock is let go: the gate's Join and a member's Begun may call back.
type release struct {
	now time.Time
	out []*dispatch.Member // to join, in this order
	// join is the scheduler's join of the wave being released; nil in a
	// pass a timer or a leader's answer began. A member the pass places
	// keeps its wave's join in its record, for its hold's end.
	join   func(*dispatch.Member)
	freed  []*dispatch.Member // followers whose hold ended, to be sent in arrival order
	leads  []lead
	groups int
	// claims is what Share said of the prefixes this replica did not
	// know when the pass began; nil without Share.
	claims map[uint64]Claim
	// shared is what Share is to be told: prefixes begun or given up.
	begun, ended []SharedPrefix
}

// Release puts each member of w in line or holds it, by its prefixes.
func (c *Release) Release(w *window.Wave[*dispatch.Member], join func(*dispatch.Member)) {
	r := release{now: time.Now(), join: join}
	if c.Share != nil {
		c.claim(w.Items, &r)
	}
	c.mu.Lock()
	for _, m := range w.Items {
		c.place(m, &r)
	}
	c.mu.Unlock()
	c.finish(&r)
}

// claim asks Share about the prefixes of ms that the registry does not
// know, in one call, before the pass.
func (c *Release) claim(ms []*dispatch.Member, r *release) {
	c.listen.Do(func() { c.Share.Listen(c.remote) })
	var ask []SharedPrefix
	seen := map[uint64]bool{}
	c.mu.Lock()
	for _, m := range ms {
		for _, p := range cacheable(m.Request()) {
			if !seen[p.Key] && c.find(p.Key, r.now) == nil && !c.distrusted(p.Key, r.now) {
				seen[p.Key] = true
				ask = append(ask, SharedPrefix{p.Key, p.TTL})
			}
		}
	}
	c.mu.Unlock()
	if len(ask) == 0 {
		return
	}
	claims := c.Share.Claim(ask, c.leaderWait())
	r.claims = make(map[uint64]Claim, len(ask))
	for i, p := range ask {
		if i < len(claims) {
			r.claims[p.Key] = claims[i]
		}
	}
}

// place decides m's role: c.mu is held. It looks for the longest prefix
// the request may read as the API does: at its breakpoints and at the
// block boundaries of their lookback windows (request.Descriptor.Reads),
// so a turn whose breakpoint rolled past the last turn's reads the entry
// that turn wrote. A boundary that is no breakpoint of this request is
// only read: it is neither led nor doubted here.
func (c *Release) place(m *dispatch.Member, r *release) {
	if len(cacheable(m.Request())) == 0 {
		r.out = append(r.out, m)
		return
	}
	ps := readable(m.Request())
	c.seq++
	pl := placeNote.Make(m)
	pl.seq, pl.c, pl.join = c.seq, c, r.join
	held := false // some prefix may be held on
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].TTL == 0 { // a lookback boundary: read if known, never led
			e := c.find(ps[i].Key, r.now)
			switch {
			case e == nil:
				continue
			case e.leader == nil && !e.remote:
				e.warmUntil = r.now.Add(e.ttl)
				pl.Role, pl.reads = CacheWarm, ps[i].Tokens
				c.send(m, nil, r)
			default:
				pl.floor, pl.reads = floorOf(ps, i), ps[i].Tokens
				c.hold(e, m, r)
			}
			return
		}
		if c.distrusted(ps[i].Key, r.now) {
			if pl.probe == nil {
				pl.probe, pl.probeFloor = &cacheGroup{key: ps[i].Key, tokens: ps[i].Tokens}, floorOf(ps, i)
			}
			continue
		}
		held = true
		e := c.find(ps[i].Key, r.now)
		if e == nil && r.claims[ps[i].Key] != ClaimLead {
			e = c.addShared(ps[i], r)
		}
		switch {
		case e == nil:
			continue
		case e.leader == nil && !e.remote:
			e.ttl = max(e.ttl, ps[i].TTL)
			e.warmUntil = r.now.Add(e.ttl) // a hit refreshes the entry, as the API does
			pl.Role, pl.reads = CacheWarm, ps[i].Tokens
			c.send(m, nil, r)
		default:
			pl.floor, pl.reads = floorOf(ps, i), ps[i].Tokens
			c.hold(e, m, r)
		}
		return
	}
	if !held { // every prefix it has is doubted: it goes as if it had none
		r.out = append(r.out, m)
		return
	}
	pl.Role = CacheLeader
	c.send(m, nil, r)
}

// send puts m in line, as the leader of led and of each of its prefixes
// the registry does not know. c.mu is held.
func (c *Release) send(m *dispatch.Member, led []*prefixEntry, r *release) {
	for _, p := range cacheable(m.Request()) {
		if c.find(p.Key, r.now) == nil && !c.distrusted(p.Key, r.now) {
			led = append(led, c.add(p, m, r))
		}
	}
	if len(led) > 0 {
		r.leads = append(r.leads, lead{m, led})
	}
	r.out = append(r.out, m)
}

// hold makes m a follower of e's leader. c.mu is held.
func (c *Release) hold(e *prefixEntry, m *dispatch.Member, r *release) {
	wait := c.leaderWait()
	until := r.now.Add(wait)
	// It must have time left for its own call: at least the wait.
	if t := m.Deadline().Add(-wait); t.Before(until) {
		until = t
	}
	if p := m.Request().Patience; p > 0 {
		if t := m.Arrived().Add(p - wait); t.Before(until) {
			until = t
		}
	}
	pl := placeOf(m)
	pl.Role = CacheFollower
	if !until.After(r.now) {
		pl.Released = ReleasedBound // no time to wait: it goes uncached
		r.out = append(r.out, m)
		return
	}
	pl.heldFrom, pl.until = r.now, until
	if len(e.held) == 0 {
		r.groups++
	}
	e.held = append(e.held, m)
	c.arm(e, until)
}

// promote hands e, whose leader (m, or one on another replica) ended
// without an answer, to its first follower still waiting, or drops it.
// c.mu is held.
func (c *Release) promote(e *prefixEntry, m *dispatch.Member, promoted map[*dispatch.Member]*prefixEntry, r *release) {
	for len(e.held) > 0 && e.leader == m {
		f := e.held[0]
		e.held[0] = nil
		e.held = e.held[1:]
		if f.Unjoined() {
			e.leader, placeOf(f).Role = f, CacheLeader
			promoted[f] = e
			c.free(f, ReleasedPromoted, r)
		}
	}
	if e.leader == m {
		c.remove(e) // nobody to hand it to: cold again
		r.ended = append(r.ended, SharedPrefix{e.key, e.ttl})
	}
}

// begun is m's response beginning (answered) or m ending without one,
// for each prefix m leads.
func (c *Release) begun(m *dispatch.Member, led []*prefixEntry, answered bool) {
	r := release{now: time.Now()}
	promoted := map[*dispatch.Member]*prefixEntry{}
	c.mu.Lock()
	for _, e := range led {
		if e.gone || e.leader != m {
			continue
		}
		if answered {
			e.leader = nil
			r.begun = append(r.begun, SharedPrefix{e.key, e.ttl})
			c.warm(e, &r)
			continue
		}
		c.promote(e, m, promoted, &r)
	}
	c.sendFreedWith(&r, promoted)
	c.mu.Unlock()
	c.finish(&r)
}

// warm makes e warm for its TTL, its leader's response having begun, and
// frees its followers to read it. c.mu is held.
func (c *Release) warm(e *prefixEntry, r *release) {
	e.warmUntil = r.now.Add(e.ttl)
	var g *cacheGroup
	for _, f := range e.held {
		if f.Unjoined() {
			if g == nil {
				g = &cacheGroup{key: e.key, tokens: e.tokens}
			}
			placeOf(f).group = g // its read tells whether the entry exists
			c.free(f, ReleasedBegun, r)
		}
	}
	clear(e.held)
	e.held = nil
	c.disarm(e)
}

// free ends f's hold. c.mu is held.
func (c *Release) free(f *dispatch.Member, why string, r *release) {
	pl := placeOf(f)
	pl.Held = r.now.Sub(pl.heldFrom)
	pl.Released = why
	r.freed = append(r.freed, f)
}

// sendFreed sends the followers freed in this pass, in arrival order.
// c.mu is held.
func (c *Release) sendFreed(r *release) { c.sendFreedWith(r, nil) }

// sendFreedWith is sendFreed where some freed followers now lead a prefix
// (promoted).
func (c *Release) sendFreedWith(r *release, promoted map[*dispatch.Member]*prefixEntry) {
	slices.SortFunc(r.freed, func(a, b *dispatch.Member) int { return cmp.Compare(placeOf(a).seq, placeOf(b).seq) })
	for _, f := range r.freed {
		var led []*prefixEntry
		if e := promoted[f]; e != nil {
			led = []*prefixEntry{e}
		}
		c.send(f, led, r)
	}
	r.freed = nil
}

// finish does what a pass decided, with c.mu no longer held.
func (c *Release) finish(r *release) {
	if c.Share != nil && (len(r.begun) > 0 || len(r.ended) > 0) {
		c.Share.Begun(r.begun, r.ended)
	}
	if c.Grouped != nil {
		for range r.groups {
			c.Grouped()
		}
	}
	for _, l := range r.leads {
		l.m.AfterBegun(func(answered bool) { c.begun(l.m, l.led, answered) })
	}
	for _, m := range r.out {
		if pl := placeNote.Peek(m); pl != nil {
			// Before its join: the pacing it goes through counts what it
			// reads out of its input estimate.
			m.ExpectRead(expectedRead(pl))
			pl.join(m)
		} else {
			r.join(m) // not cacheable: never placed, and only a wave's pass sends it
		}
	}
}
