package dispatch

import (
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
)

// Pacing holds members back, outside the gate, until what they will spend
// of their upstream key's rate limits is there, and learns from each
// answer what was spent. A member it holds takes no slot, so one key's
// spent limit never holds another key's requests. Config.Pacing sets it;
// its methods are called on the request path and must not block.
type Pacing interface {
	// Pace calls join(m) once m may go, now or later, unless live reports
	// that m no longer waits by then.
	Pace(m *Member, join func(*Member), live func() bool)
	// Settle learns from an upstream answer to m: its status and headers.
	Settle(m *Member, status int, h http.Header)
	// Used corrects m's estimate with the usage its answer reported.
	Used(m *Member, u Usage)
	// End is m's passage ending: a debit no answer settled is given back.
	End(m *Member)
	// Holds reports whether a request like r would be held now.
	Holds(r *request.Descriptor) bool
}

// BucketStore keeps the model of each upstream key's rate-limit buckets
// that KeyBuckets paces by: a *pace.Buckets in this process, or one that
// every replica shares (redisgate.Buckets). Its methods are pace.Buckets'.
type BucketStore interface {
	Take(key string, c pace.Cost, now time.Time) (pace.Debit, bool, time.Time)
	FitsAt(key string, c pace.Cost, now time.Time) time.Time
	Refund(d pace.Debit, now time.Time)
	Correct(d pace.Debit, spent pace.Cost, now time.Time)
	Observe(key string, d pace.Debit, status int, h http.Header, now time.Time)
	Levels(now time.Time) []pace.Level
}

var _ BucketStore = (*pace.Buckets)(nil)

// Usage is what an answer says it spent of the limits.
type Usage struct {
	Input      int // uncached input tokens
	CacheWrite int // tokens written to the cache: they count as input
	Output     int
}

// spend is a member's debit of its key's buckets.
type spend struct {
	debit   pace.Debit
	settled bool          // an answer came: End gives nothing back
	held    time.Duration // how long Pace held it, in all
}

// BucketWait is how long the member was held for its key's rate limits.
// Read it from the member's function.
func (m *Member) BucketWait() time.Duration { return m.spend.held }

// Used reports the usage of the member's answer, to correct its debit of
// its key's rate limits; the proxy calls it once it has read the usage,
// which for a whole JSON answer may be after the member has ended.
func (m *Member) Used(u Usage) {
	if m.s.pacing != nil {
		m.s.pacing.Used(m, u)
	}
}

// KeyBuckets is the Pacing by token buckets per upstream key (package
// pace): a member's cost (one request; its estimated uncached input
// tokens, since cache reads do not count toward the input limit; and its
// output estimate) is debited from its key's buckets as it goes to the
// gate. The head of a key's line goes as soon as its cost fits, so an
// exhausted bucket holds its key for the time it takes to refill by one
// request's cost, not until the bucket is full again; a key's tenants
// take turns, a tenant's head that fits may pass another's that does not
// for a bounded time (see keyLine), and within a key and tenant nobody
// overtakes. Whenever an answer changes what the buckets hold (the unused
// part of a max_tokens given back, a refusal's refund, headers that raise
// the estimate), the key's line is looked at again. A 429 that still
// comes holds its key alone, for its retry-after.
//
// The output limit is debited max_tokens up front and corrected to the
// reply's usage once it has ended, which is how the API's documentation
// says it counts that limit: a long stream holds its whole max_tokens of
// the output bucket for its life, here as upstream, and gives back what it
// did not use at its end. Each answer's headers keep the estimate within
// what they allow.
//
// A held member costs a record in its key's line, and a key with held
// members one timer: no goroutine.
type KeyBuckets struct {
	Buckets BucketStore
	// Held, if set, is called with how long a member was held each time
	// a held member goes. It must be quick.
	Held func(d time.Duration)

	mu    sync.Mutex
	lines map[string]*keyLine
}

var _ Pacing = (*KeyBuckets)(nil)

// keyLine is one key's held members: a queue per tenant, each in arrival
// order, whose heads go in turns. With inbound keys every tenant spends
// the one upstream key sluice holds, so one line for all would let one
// tenant's burst hold everyone else's requests behind the whole of it,
// before the gate's fair order could see them. Within a tenant nobody
// overtakes.
//
// A head that does not fit holds the other tenants' heads behind it for
// passGrace at most: long enough for the answers in flight to come back
// and give back what they did not use of their max_tokens, after which a
// head that was only short of those fits. A head that still does not fit
// then cannot for a while (it asks for most of a bucket that others
// spend), and the other tenants' heads that fit pass it, in turn order,
// rather than wait the minute its refill may take. It is passed for a
// bounded time only: its reserve time is passGrace plus the wait for its
// cost that the buckets showed when it first failed (when it would have
// fitted had nobody passed it); from then on it holds the bucket, and
// nobody goes before it until it fits. So a head waits at most
// passGrace, plus its first wait, plus the refill of what others took
// meanwhile, which is at most its own cost: no more than passGrace and
// twice the time its cost takes to refill from empty (2 min 1 s for a
// whole bucket), as far as the model of the buckets knows (a 429's hold
// comes on top), and sooner when answers give back what they did not use.
// Its tenant's later requests wait behind it, each with the same bound
// once at the head.
type keyLine struct {
	key   string
	ring  []*tenantQueue // tenants with members held, in turn order
	turn  int            // the tenant in ring whose head goes next
	timer *time.Timer
	due   time.Time
}

// tenantQueue is one tenant's held members of a key, in arrival order.
type tenantQueue struct {
	tenant  string
	waiting []pacedMember
}

// held reports whether l holds anyone. k.mu is held.
func (l *keyLine) held() bool { return len(l.ring) > 0 }

// push puts p at the back of its tenant's queue. k.mu is held.
func (l *keyLine) push(p pacedMember) {
	t := p.m.req.Tenant
	for _, q := range l.ring {
		if q.tenant == t {
			q.waiting = append(q.waiting, p)
			return
		}
	}
	l.ring = append(l.ring, &tenantQueue{tenant: t, waiting: []pacedMember{p}})
}

// popAt takes the head of the tenant at i out and passes the turn on to
// the tenant after it. k.mu is held.
func (l *keyLine) popAt(i int) {
	l.turn = i
	q := l.ring[l.turn]
	q.waiting[0] = pacedMember{}
	q.waiting = q.waiting[1:]
	if len(q.waiting) == 0 {
		l.remove(l.turn) // the next tenant moves into the turn
	} else {
		l.turn++
	}
	if l.turn >= len(l.ring) {
		l.turn = 0
	}
}

// remove drops the tenant at i from the ring. k.mu is held.
func (l *keyLine) remove(i int) {
	l.ring[i] = nil
	l.ring = append(l.ring[:i], l.ring[i+1:]...)
	if i < l.turn {
		l.turn--
	}
}

type pacedMember struct {
	m     *Member
	join  func(*Member)
	live  func() bool
	since time.Time
	// failed is when this member first failed to fit at the head of its
	// tenant's queue, zero until then; reserve is when it holds the
	// bucket against other tenants' heads from then on (see keyLine).
	failed, reserve time.Time
}

// passGrace is how long a head that does not fit holds the other
// tenants' heads of its key behind it before they may pass it (see
// keyLine).
const passGrace = time.Second

// fail marks p as having failed to fit at now, when its cost would fit
// at: its grace and its reserve time start from the first time.
func (p *pacedMember) fail(now, at time.Time) {
	if p.failed.IsZero() {
		p.failed = now
		p.reserve = now.Add(passGrace + max(at.Sub(now), 0))
	}
}

// holding reports whether p, a head, holds the others behind it at now:
// within its grace, or past its reserve time.
func (p *pacedMember) holding(now time.Time) bool {
	return !p.failed.IsZero() && (now.Before(p.failed.Add(passGrace)) || !now.Before(p.reserve))
}

// cost is what m is estimated to spend.
func (k *KeyBuckets) cost(r *request.Descriptor, cached int) pace.Cost {
	return pace.Cost{
		Input:  float64(max(r.Cost.InputTokens-cached, 1)),
		Output: float64(r.Cost.MaxTokens),
	}
}

// cachedTokens is how much of m's prompt is expected to be read from the
// cache: the longest cacheable prefix of a follower or of a warm prefix.
func cachedTokens(m *Member) int {
	if m.cache.Role != CacheWarm && (m.cache.Role != CacheFollower || m.cache.Released != ReleasedBegun) {
		return 0
	}
	n := 0
	for _, p := range cacheable(m.req) {
		n = max(n, p.Tokens)
	}
	return n
}

// Pace debits m and joins it now if its key's line is empty and its cost
// fits, and otherwise holds it at the back of its tenant's queue in its
// key's line.
func (k *KeyBuckets) Pace(m *Member, join func(*Member), live func() bool) {
	now := time.Now()
	key := m.req.Key
	c := k.cost(m.req, cachedTokens(m))
	k.mu.Lock()
	l := k.lines[key]
	if l != nil {
		l.prune()
	}
	if l == nil || !l.held() {
		d, ok, at := k.Buckets.Take(key, c, now)
		if ok {
			m.spend = spend{debit: d, held: m.spend.held}
			k.mu.Unlock()
			join(m)
			return
		}
		if l == nil {
			if k.lines == nil {
				k.lines = map[string]*keyLine{}
			}
			l = &keyLine{key: key}
			k.lines[key] = l
		}
		p := pacedMember{m: m, join: join, live: live, since: now}
		p.fail(now, at)
		l.push(p)
		k.arm(l, at)
		k.mu.Unlock()
		return
	}
	// A line is held: m goes behind its own tenant's held members, but
	// may pass other tenants' heads that do not fit.
	l.push(pacedMember{m: m, join: join, live: live, since: now})
	out := k.serve(l, now)
	k.mu.Unlock()
	k.release(out, now)
}

// prune drops the members at the head of each of l's queues that no
// longer wait, and the tenants left with none. k.mu is held.
func (l *keyLine) prune() {
	for i := 0; i < len(l.ring); {
		q := l.ring[i]
		n := 0
		for n < len(q.waiting) && !q.waiting[n].live() {
			n++
		}
		if n > 0 {
			clear(q.waiting[:n])
			q.waiting = q.waiting[n:]
		}
		if len(q.waiting) == 0 {
			l.remove(i)
			continue
		}
		i++
	}
	if l.turn >= len(l.ring) {
		l.turn = 0
	}
}

// arm makes l's timer fire at t. k.mu is held.
func (k *KeyBuckets) arm(l *keyLine, t time.Time) {
	if !l.due.IsZero() && !t.Before(l.due) {
		return
	}
	l.due = t
	if l.timer == nil {
		l.timer = time.AfterFunc(time.Until(t), func() { k.wake(l) })
	} else {
		l.timer.Reset(time.Until(t))
	}
}

// wake lets go the members at the heads of l whose cost fits now and
// arms l's timer for the next.
func (k *KeyBuckets) wake(l *keyLine) {
	now := time.Now()
	k.mu.Lock()
	l.due = time.Time{}
	out := k.serve(l, now)
	k.mu.Unlock()
	k.release(out, now)
}

// serve debits and takes out of l the heads that may go now, a tenant at
// a time in turns, and arms l's timer for when the next might; the
// caller joins them (release) once k.mu is let go. k.mu is held.
func (k *KeyBuckets) serve(l *keyLine, now time.Time) []pacedMember {
	var out []pacedMember
	for {
		l.prune()
		if !l.held() {
			if k.lines[l.key] == l {
				delete(k.lines, l.key) // a later member makes a new line
			}
			return out
		}
		i, d, next := k.pick(l, now)
		if i < 0 {
			k.arm(l, next)
			return out
		}
		p := l.ring[i].waiting[0]
		p.m.spend = spend{debit: d, held: p.m.spend.held + now.Sub(p.since)}
		l.popAt(i)
		out = append(out, p)
	}
}

// pick is the tenant in l whose head goes now, debited, or -1 and when
// one might. A head past its reserve time holds the bucket (the first
// such in turn order): it goes if it fits, and nobody else. Otherwise the
// heads are tried in turn order: one that fits goes; one that does not is
// passed if its grace is over, and otherwise holds the rest behind it
// (see keyLine). k.mu is held.
func (k *KeyBuckets) pick(l *keyLine, now time.Time) (int, pace.Debit, time.Time) {
	n := len(l.ring)
	for j := range n {
		i := (l.turn + j) % n
		p := &l.ring[i].waiting[0]
		if p.failed.IsZero() || now.Before(p.reserve) {
			continue
		}
		d, ok, at := k.Buckets.Take(l.key, k.cost(p.m.req, cachedTokens(p.m)), now)
		if ok {
			return i, d, now
		}
		return -1, pace.Debit{}, at
	}
	var next time.Time
	soonest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for j := range n {
		i := (l.turn + j) % n
		p := &l.ring[i].waiting[0]
		c := k.cost(p.m.req, cachedTokens(p.m))
		at := k.Buckets.FitsAt(l.key, c, now)
		if !at.After(now) {
			d, ok, when := k.Buckets.Take(l.key, c, now)
			if ok {
				return i, d, now
			}
			at = when
		}
		p.fail(now, at)
		soonest(at)
		if p.holding(now) {
			soonest(p.failed.Add(passGrace)) // the others may pass it then
			break
		}
		soonest(p.reserve) // it holds the others again then
	}
	return -1, pace.Debit{}, next
}

// release joins the members serve let go, and reports how long each was
// held.
func (k *KeyBuckets) release(out []pacedMember, now time.Time) {
	for _, p := range out {
		if k.Held != nil {
			k.Held(now.Sub(p.since))
		}
		p.join(p.m)
	}
}

// fitsAt is the soonest any of l's heads would fit, as far as the
// buckets are known at now. l.held() and k.mu is held.
func (l *keyLine) fitsAt(k *KeyBuckets, now time.Time) time.Time {
	var at time.Time
	for _, q := range l.ring {
		p := q.waiting[0]
		if t := k.Buckets.FitsAt(l.key, k.cost(p.m.req, cachedTokens(p.m)), now); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
}

// Settle learns the key's limits from the answer's headers. A refusal
// gives the member's tokens back, and a 429 its request too, since the
// upstream counted neither; a 429's retry-after holds the key (its line's
// timer finds the hold when it next fires).
func (k *KeyBuckets) Settle(m *Member, status int, h http.Header) {
	now := time.Now()
	k.Buckets.Observe(m.req.Key, m.spend.debit, status, h, now)
	if !m.spend.settled {
		m.spend.settled = true
		switch {
		case status == http.StatusTooManyRequests:
			k.Buckets.Refund(m.spend.debit, now)
		case status >= 300:
			k.Buckets.Correct(m.spend.debit, pace.Cost{}, now)
		}
	}
	k.recheck(m.req.Key, now)
}

// Used corrects m's debit to its answer's usage.
func (k *KeyBuckets) Used(m *Member, u Usage) {
	now := time.Now()
	k.Buckets.Correct(m.spend.debit, pace.Cost{Input: float64(u.Input + u.CacheWrite), Output: float64(u.Output)}, now)
	k.recheck(m.req.Key, now)
}

// End gives back a debit that no answer settled: the call never reached
// the upstream, or got no answer.
func (k *KeyBuckets) End(m *Member) {
	// Under k.mu: a requeued member that left while its key's line let it
	// go (Member.Requeue) may have been debited by wake just now.
	k.mu.Lock()
	sp := m.spend
	m.spend.settled = true
	k.mu.Unlock()
	if !sp.settled {
		now := time.Now()
		k.Buckets.Refund(sp.debit, now)
		k.recheck(m.req.Key, now)
	}
}

// recheck re-arms key's line, if it holds anyone, for when its heads fit
// now that an answer has changed what the buckets hold: the unused part
// of a max_tokens given back at an answer's end, a refusal's refund or
// headers that raise the estimate. The timer was armed for the refill
// alone, which for a key limited on output tokens, whose requests give
// back most of their max_tokens, was tens of seconds late.
func (k *KeyBuckets) recheck(key string, now time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l := k.lines[key]
	if l == nil || !l.held() {
		return
	}
	k.arm(l, l.fitsAt(k, now))
}

// Holds reports whether a request like r would be held now: its tenant
// has members held on its key, a head there holds the others behind it
// (see keyLine), or its cost does not fit.
func (k *KeyBuckets) Holds(r *request.Descriptor) bool {
	now := time.Now()
	k.mu.Lock()
	l := k.lines[r.Key]
	held := l != nil && l.holds(r.Tenant, now)
	k.mu.Unlock()
	return held || k.Buckets.FitsAt(r.Key, k.cost(r, 0), now).After(now)
}

// holds reports whether l holds a new member of tenant: behind its own
// tenant's, or behind a head that holds the others. k.mu is held.
func (l *keyLine) holds(tenant string, now time.Time) bool {
	for _, q := range l.ring {
		if p := &q.waiting[0]; q.tenant == tenant || p.holding(now) {
			return true
		}
	}
	return false
}

// HeldUntil is when a request like r would fit in its key's buckets, as
// far as is known now.
func (k *KeyBuckets) HeldUntil(r *request.Descriptor) time.Time {
	return k.Buckets.FitsAt(r.Key, k.cost(r, 0), time.Now())
}
