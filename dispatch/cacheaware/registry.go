package cacheaware

import (
	"container/list"
	"github.com/sluicehq/sluice/dispatch"
	"time"

	"github.com/sluicehq/sluice/request"
)

// The cache-aware release's registry of prefixes: found, added and
// removed, and bounded in time and number.

// prefixEntry is one prefix in the registry: cold with its leader in
// flight (leader set; or remote, its leader on another replica until
// remoteUntil at the latest), or warm until warmUntil.
type prefixEntry struct {
	key         uint64
	ttl         time.Duration
	tokens      int
	leader      *dispatch.Member
	remote      bool
	remoteUntil time.Time
	warmUntil   time.Time
	held        []*dispatch.Member // followers, in arrival order
	timer       *time.Timer
	due         time.Time // when timer fires; zero when not armed
	elem        *list.Element
	gone        bool // dropped from the registry
}

// arm makes e's timer fire by t. c.mu is held.
func (c *Release) arm(e *prefixEntry, t time.Time) {
	if !e.due.IsZero() && !t.Before(e.due) {
		return
	}
	e.due = t
	if e.timer == nil {
		e.timer = time.AfterFunc(time.Until(t), func() { c.expire(e) })
	} else {
		e.timer.Reset(time.Until(t))
	}
}

// expire lets the followers of e whose hold has run out go.
func (c *Release) expire(e *prefixEntry) {
	r := release{now: time.Now()}
	c.mu.Lock()
	if e.gone {
		c.mu.Unlock()
		return
	}
	e.due = time.Time{}
	keep := e.held[:0]
	var next time.Time
	lapsed := e.remote && !e.remoteUntil.After(r.now) // the remote leader's lease ran out
	for _, f := range e.held {
		switch {
		case !f.Unjoined(): // it left: nothing to do
		case lapsed || !placeOf(f).until.After(r.now):
			c.free(f, ReleasedBound, &r)
		default:
			keep = append(keep, f)
			if next.IsZero() || placeOf(f).until.Before(next) {
				next = placeOf(f).until
			}
		}
	}
	clear(e.held[len(keep):])
	e.held = keep
	if lapsed {
		c.remove(e)
	} else if !next.IsZero() {
		c.arm(e, next)
	}
	if e.remote && !lapsed {
		c.arm(e, e.remoteUntil)
	}
	c.sendFreed(&r)
	c.mu.Unlock()
	c.finish(&r)
}

// find is the registry's entry for key, nil if it has none or its warm
// entry has expired. c.mu is held.
func (c *Release) find(key uint64, now time.Time) *prefixEntry {
	el := c.entries[key]
	if el == nil {
		return nil
	}
	e := el.Value.(*prefixEntry)
	if e.leader == nil && !e.remote && !now.Before(e.warmUntil) {
		c.remove(e)
		return nil
	}
	c.lru.MoveToFront(el)
	return e
}

// add registers p as cold, led by m, making room if the registry is full.
// c.mu is held.
func (c *Release) add(p request.Prefix, m *dispatch.Member, r *release) *prefixEntry {
	if c.entries == nil {
		c.entries = map[uint64]*list.Element{}
	}
	for c.lru.Len() >= c.maxPrefixes() {
		old := c.lru.Back().Value.(*prefixEntry)
		for _, f := range old.held {
			if f.Unjoined() {
				pl := placeOf(f)
				pl.Held, pl.Released = r.now.Sub(pl.heldFrom), ReleasedEvicted
				r.out = append(r.out, f) // uncached; and it leads nothing, to keep the registry's size
			}
		}
		c.remove(old)
	}
	e := &prefixEntry{key: p.Key, ttl: p.TTL, tokens: p.Tokens, leader: m}
	e.elem = c.lru.PushFront(e)
	c.entries[p.Key] = e.elem
	return e
}

// remove drops e from the registry. c.mu is held.
func (c *Release) remove(e *prefixEntry) {
	e.gone = true
	delete(c.entries, e.key)
	c.lru.Remove(e.elem)
	c.disarm(e)
	e.held = nil
}

func (c *Release) disarm(e *prefixEntry) {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.due = time.Time{}
}

func (c *Release) maxPrefixes() int {
	if c.MaxPrefixes > 0 {
		return c.MaxPrefixes
	}
	return DefaultMaxPrefixes
}

func (c *Release) leaderWait() time.Duration {
	if c.LeaderWait > 0 {
		return c.LeaderWait
	}
	return DefaultLeaderWait
}

// Len is how many prefixes the registry holds, cold and warm.
func (c *Release) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// cacheable is r's prefixes at or above its model's minimum cacheable
// length, shortest first.
func cacheable(r *request.Descriptor) []request.Prefix {
	least := request.CacheMinimum(r.Model)
	for i, p := range r.Prefixes {
		if p.Tokens >= least {
			return r.Prefixes[i:]
		}
	}
	return nil
}

// readable is the prefixes r may read, at or above its model's minimum
// cacheable length, shortest first: its breakpoints' and those of their
// lookback windows (TTL 0); its cacheable prefixes when it has no reads
// (a descriptor made without them).
func readable(r *request.Descriptor) []request.Prefix {
	if len(r.Reads) == 0 {
		return cacheable(r)
	}
	least := request.CacheMinimum(r.Model)
	for i, p := range r.Reads {
		if p.Tokens >= least {
			return r.Reads[i:]
		}
	}
	return nil
}

// floorOf is the tokens of the prefix before ps[i], 0 for the first.
func floorOf(ps []request.Prefix, i int) int {
	if i == 0 {
		return 0
	}
	return ps[i-1].Tokens
}

// Held is how many followers are held now, for a gauge: it walks the
// registry (bounded by MaxPrefixes), so call it on a scrape, not per
// request.
func (c *Release) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for el := c.lru.Front(); el != nil; el = el.Next() {
		for _, f := range el.Value.(*prefixEntry).held {
			if f.Unjoined() { // one that left is dropped on the next pass
				n++
			}
		}
	}
	return n
}
