package dispatch

import (
	"cmp"
	"container/list"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/window"
)

// Defaults of CacheAware.
const (
	// DefaultLeaderWait is how long a follower is held, at most, for its
	// leader's response to begin: about the time to first token of a
	// large uncached prompt (prefill runs at thousands of tokens a second,
	// so 5 s covers a prompt of tens of thousands of tokens with room for
	// a queue at the upstream). A leader slower than this is no longer
	// worth waiting for: its followers then go uncached, as without
	// CacheAware, having lost at most this much.
	DefaultLeaderWait = 5 * time.Second
	// DefaultMaxPrefixes bounds the registry: a few hundred KB.
	DefaultMaxPrefixes = 4096
)

// CacheRole is what a request was to the prompt cache when CacheAware put
// it in line.
type CacheRole uint8

const (
	CacheNone     CacheRole = iota // no prefix at or above its model's minimum: put in line at once, as by InOrder
	CacheLeader                    // the first on a cold prefix: put in line at once, to write it
	CacheFollower                  // held outside the gate for a leader on its prefix, then put in line
	CacheWarm                      // its prefix was warm: put in line at once, to read it
)

// String is the role as the access line says it ("" for CacheNone).
func (r CacheRole) String() string {
	switch r {
	case CacheLeader:
		return "leader"
	case CacheFollower:
		return "follower"
	case CacheWarm:
		return "warm"
	}
	return ""
}

// Why a follower's hold ended (CacheStanding.Released).
const (
	ReleasedBegun    = "begun"    // its leader's response began: the cache entry exists
	ReleasedPromoted = "promoted" // its leader ended without an answer: it leads now
	ReleasedBound    = "bound"    // the leader wait, or its own deadline or patience, ran out
	ReleasedEvicted  = "evicted"  // its prefix was pushed out of the registry
)

// CacheStanding is what CacheAware made of a member; the zero value when
// the scheduler's releaser is not CacheAware.
type CacheStanding struct {
	Role     CacheRole
	Held     time.Duration // how long a follower was held outside the gate
	Released string        // why a follower's hold ended: one of the Released* values
}

// CacheStanding is what the cache-aware releaser made of the member. Read
// it from the member's function (it is final once the member is in line).
func (m *Member) CacheStanding() CacheStanding { return m.cache.CacheStanding }

// cachePlace is a member's place in the CacheAware registry.
type cachePlace struct {
	CacheStanding
	seq      uint64        // arrival order among cacheable members
	heldFrom time.Time     // when its hold began
	until    time.Time     // when its hold ends at the latest
	join     func(*Member) // its scheduler's join
	c        *CacheAware   // for CacheRead
	// group is the group of a follower its leader's beginning freed;
	// floor the tokens of its next shorter cacheable prefix, which a read
	// must pass to be of the prefix it followed (see CacheRead).
	group *cacheGroup
	floor int
	// probe is the longest of its prefixes that was not held on (see
	// DoubtGroups), and probeFloor its floor: a read past it shows the
	// prefix cached after all.
	probe      *cacheGroup
	probeFloor int
}

// CacheAware is a Releaser that lets concurrent requests sharing a cached
// prompt prefix pay for it once. The API creates a cache entry only once
// the first response carrying the prefix has begun, so requests sent
// together all write the same prefix, at 1.25 times the input price, and
// all wait for its full prefill. CacheAware sends the first request of a
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
// uncached, as without CacheAware.
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
type CacheAware struct {
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
	// flight on another replica too (see CacheShare). Set it before the
	// first Release.
	Share CacheShare
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

var _ Releaser = (*CacheAware)(nil)

// prefixEntry is one prefix in the registry: cold with its leader in
// flight (leader set; or remote, its leader on another replica until
// remoteUntil at the latest), or warm until warmUntil.
type prefixEntry struct {
	key         uint64
	ttl         time.Duration
	tokens      int
	leader      *Member
	remote      bool
	remoteUntil time.Time
	warmUntil   time.Time
	held        []*Member // followers, in arrival order
	timer       *time.Timer
	due         time.Time // when timer fires; zero when not armed
	elem        *list.Element
	gone        bool // dropped from the registry
}

// lead is a member put in line as the leader of some prefixes: once its
// response begins they turn warm, or are handed to a follower.
type lead struct {
	m   *Member
	led []*prefixEntry
}

// release is what one pass over the registry puts in line, done once its
// lock is let go: the gate's Join and a member's Begun may call back.
type release struct {
	now    time.Time
	out    []*Member // to join, in this order
	freed  []*Member // followers whose hold ended, to be sent in arrival order
	leads  []lead
	groups int
	// claims is what Share said of the prefixes this replica did not
	// know when the pass began; nil without Share.
	claims map[uint64]CacheClaim
	// shared is what Share is to be told: prefixes begun or given up.
	begun, ended []SharedPrefix
}

// CacheShare shares CacheAware's registry with the other replicas of a
// fleet, so that a fleet behind a load balancer pays one cache write per
// prefix: the first replica to claim a cold prefix leads it fleet-wide,
// and followers on every replica wait for its response to begin.
// redisgate.CacheGroups is the one through Redis. Claim and Begun are
// bounded by a short timeout; a share that cannot be reached claims
// everything (each replica leads on its own, as without a share).
type CacheShare interface {
	// Claim asks, of prefixes this replica does not know, which are cold
	// (now led from here for lease at most), led elsewhere, or warm: one
	// answer per prefix, in order. It is called once per wave.
	Claim(ps []SharedPrefix, lease time.Duration) []CacheClaim
	// Begun tells the fleet that a leader here has had its response
	// begin on begun (now warm for their TTLs) and has ended without one
	// on ended (cold again).
	Begun(begun, ended []SharedPrefix)
	// Listen sets the function told of a prefix led elsewhere that has
	// begun (warm for ttl) or ended without an answer. Called once.
	Listen(f func(key uint64, ttl time.Duration, begun bool))
}

// SharedPrefix is a prefix as a CacheShare knows it.
type SharedPrefix struct {
	Key uint64
	TTL time.Duration
}

// CacheClaim is a CacheShare's answer about one prefix.
type CacheClaim uint8

const (
	ClaimLead      CacheClaim = iota // cold: led from here
	ClaimElsewhere                   // cold, its leader in flight on another replica
	ClaimWarm                        // warm
)

// Release puts each member of w in line or holds it, by its prefixes.
func (c *CacheAware) Release(w *window.Wave[*Member], join func(*Member)) {
	r := release{now: time.Now()}
	if c.Share != nil {
		c.claim(w.Items, &r)
	}
	c.mu.Lock()
	for _, m := range w.Items {
		m.cache.join = join
		c.place(m, &r)
	}
	c.mu.Unlock()
	c.finish(&r)
}

// claim asks Share about the prefixes of ms that the registry does not
// know, in one call, before the pass.
func (c *CacheAware) claim(ms []*Member, r *release) {
	c.listen.Do(func() { c.Share.Listen(c.remote) })
	var ask []SharedPrefix
	seen := map[uint64]bool{}
	c.mu.Lock()
	for _, m := range ms {
		for _, p := range cacheable(m.req) {
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
	r.claims = make(map[uint64]CacheClaim, len(ask))
	for i, p := range ask {
		if i < len(claims) {
			r.claims[p.Key] = claims[i]
		}
	}
}

// place decides m's role: c.mu is held.
func (c *CacheAware) place(m *Member, r *release) {
	ps := cacheable(m.req)
	if len(ps) == 0 {
		r.out = append(r.out, m)
		return
	}
	c.seq++
	m.cache.seq, m.cache.c = c.seq, c
	held := false // some prefix may be held on
	for i := len(ps) - 1; i >= 0; i-- {
		if c.distrusted(ps[i].Key, r.now) {
			if m.cache.probe == nil {
				m.cache.probe, m.cache.probeFloor = &cacheGroup{key: ps[i].Key, tokens: ps[i].Tokens}, floorOf(ps, i)
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
			m.cache.Role = CacheWarm
			c.send(m, nil, r)
		default:
			m.cache.floor = floorOf(ps, i)
			c.hold(e, m, r)
		}
		return
	}
	if !held { // every prefix it has is doubted: it goes as if it had none
		r.out = append(r.out, m)
		return
	}
	m.cache.Role = CacheLeader
	c.send(m, nil, r)
}

// send puts m in line, as the leader of led and of each of its prefixes
// the registry does not know. c.mu is held.
func (c *CacheAware) send(m *Member, led []*prefixEntry, r *release) {
	for _, p := range cacheable(m.req) {
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
func (c *CacheAware) hold(e *prefixEntry, m *Member, r *release) {
	wait := c.leaderWait()
	until := r.now.Add(wait)
	// It must have time left for its own call: at least the wait.
	if t := m.Deadline().Add(-wait); t.Before(until) {
		until = t
	}
	if p := m.req.Patience; p > 0 {
		if t := m.joined.Add(p - wait); t.Before(until) {
			until = t
		}
	}
	m.cache.Role = CacheFollower
	if !until.After(r.now) {
		m.cache.Released = ReleasedBound // no time to wait: it goes uncached
		r.out = append(r.out, m)
		return
	}
	m.cache.heldFrom, m.cache.until = r.now, until
	if len(e.held) == 0 {
		r.groups++
	}
	e.held = append(e.held, m)
	c.arm(e, until)
}

// addShared registers p as another replica said it is: warm, or led
// there (its followers here held until it begins, it ends, or its
// lease would have run out). c.mu is held.
func (c *CacheAware) addShared(p request.Prefix, r *release) *prefixEntry {
	claim := r.claims[p.Key]
	delete(r.claims, p.Key) // once: later members find the entry
	e := c.add(p, nil, r)
	if claim == ClaimWarm {
		e.warmUntil = r.now.Add(p.TTL)
		return e
	}
	e.remote, e.remoteUntil = true, r.now.Add(c.leaderWait())
	c.arm(e, e.remoteUntil)
	return e
}

// remote is Share's news of a prefix led on another replica: its
// followers here go, reading the cache if it has begun; if its leader
// ended without an answer, the first of them leads it here.
func (c *CacheAware) remote(key uint64, ttl time.Duration, begun bool) {
	r := release{now: time.Now()}
	promoted := map[*Member]*prefixEntry{}
	c.mu.Lock()
	el := c.entries[key]
	if el == nil || !el.Value.(*prefixEntry).remote {
		c.mu.Unlock()
		return
	}
	e := el.Value.(*prefixEntry)
	e.remote = false
	if begun {
		e.ttl = max(e.ttl, ttl)
		c.warm(e, &r)
	} else {
		c.promote(e, nil, promoted, &r)
		r.ended = nil // the fleet has heard: its leader's replica said so
	}
	c.sendFreedWith(&r, promoted)
	c.mu.Unlock()
	c.finish(&r)
}

// promote hands e, whose leader (m, or one on another replica) ended
// without an answer, to its first follower still waiting, or drops it.
// c.mu is held.
func (c *CacheAware) promote(e *prefixEntry, m *Member, promoted map[*Member]*prefixEntry, r *release) {
	for len(e.held) > 0 && e.leader == m {
		f := e.held[0]
		e.held[0] = nil
		e.held = e.held[1:]
		if f.at(flushed) {
			e.leader, f.cache.Role = f, CacheLeader
			promoted[f] = e
			c.free(f, ReleasedPromoted, r)
		}
	}
	if e.leader == m {
		c.remove(e) // nobody to hand it to: cold again
		r.ended = append(r.ended, SharedPrefix{e.key, e.ttl})
	}
}

// arm makes e's timer fire by t. c.mu is held.
func (c *CacheAware) arm(e *prefixEntry, t time.Time) {
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
func (c *CacheAware) expire(e *prefixEntry) {
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
		case !f.at(flushed): // it left: nothing to do
		case lapsed || !f.cache.until.After(r.now):
			c.free(f, ReleasedBound, &r)
		default:
			keep = append(keep, f)
			if next.IsZero() || f.cache.until.Before(next) {
				next = f.cache.until
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

// begun is m's response beginning (answered) or m ending without one,
// for each prefix m leads.
func (c *CacheAware) begun(m *Member, led []*prefixEntry, answered bool) {
	r := release{now: time.Now()}
	promoted := map[*Member]*prefixEntry{}
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
func (c *CacheAware) warm(e *prefixEntry, r *release) {
	e.warmUntil = r.now.Add(e.ttl)
	var g *cacheGroup
	for _, f := range e.held {
		if f.at(flushed) {
			if g == nil {
				g = &cacheGroup{key: e.key, tokens: e.tokens}
			}
			f.cache.group = g // its read tells whether the entry exists
			c.free(f, ReleasedBegun, r)
		}
	}
	clear(e.held)
	e.held = nil
	c.disarm(e)
}

// free ends f's hold. c.mu is held.
func (c *CacheAware) free(f *Member, why string, r *release) {
	f.cache.Held = r.now.Sub(f.cache.heldFrom)
	f.cache.Released = why
	r.freed = append(r.freed, f)
}

// sendFreed sends the followers freed in this pass, in arrival order.
// c.mu is held.
func (c *CacheAware) sendFreed(r *release) { c.sendFreedWith(r, nil) }

// sendFreedWith is sendFreed where some freed followers now lead a prefix
// (promoted).
func (c *CacheAware) sendFreedWith(r *release, promoted map[*Member]*prefixEntry) {
	slices.SortFunc(r.freed, func(a, b *Member) int { return cmp.Compare(a.cache.seq, b.cache.seq) })
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
func (c *CacheAware) finish(r *release) {
	if c.Share != nil && (len(r.begun) > 0 || len(r.ended) > 0) {
		c.Share.Begun(r.begun, r.ended)
	}
	if c.Grouped != nil {
		for range r.groups {
			c.Grouped()
		}
	}
	for _, l := range r.leads {
		l.m.afterBegun(func(answered bool) { c.begun(l.m, l.led, answered) })
	}
	for _, m := range r.out {
		m.cache.join(m)
	}
}

// find is the registry's entry for key, nil if it has none or its warm
// entry has expired. c.mu is held.
func (c *CacheAware) find(key uint64, now time.Time) *prefixEntry {
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
func (c *CacheAware) add(p request.Prefix, m *Member, r *release) *prefixEntry {
	if c.entries == nil {
		c.entries = map[uint64]*list.Element{}
	}
	for c.lru.Len() >= c.maxPrefixes() {
		old := c.lru.Back().Value.(*prefixEntry)
		for _, f := range old.held {
			if f.at(flushed) {
				f.cache.Held, f.cache.Released = r.now.Sub(f.cache.heldFrom), ReleasedEvicted
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
func (c *CacheAware) remove(e *prefixEntry) {
	e.gone = true
	delete(c.entries, e.key)
	c.lru.Remove(e.elem)
	c.disarm(e)
	e.held = nil
}

func (c *CacheAware) disarm(e *prefixEntry) {
	if e.timer != nil {
		e.timer.Stop()
	}
	e.due = time.Time{}
}

func (c *CacheAware) maxPrefixes() int {
	if c.MaxPrefixes > 0 {
		return c.MaxPrefixes
	}
	return DefaultMaxPrefixes
}

func (c *CacheAware) leaderWait() time.Duration {
	if c.LeaderWait > 0 {
		return c.LeaderWait
	}
	return DefaultLeaderWait
}

// Len is how many prefixes the registry holds, cold and warm.
func (c *CacheAware) Len() int {
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
func (c *CacheAware) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for el := c.lru.Front(); el != nil; el = el.Next() {
		for _, f := range el.Value.(*prefixEntry).held {
			if f.at(flushed) { // one that left is dropped on the next pass
				n++
			}
		}
	}
	return n
}
