package buckets

import (
	"time"

	"github.com/sluicehq/sluice/dispatch"
)

// A key's line under RATE_LIMIT_PACING=buckets: its members held for its
// buckets, a queue per tenant, served in turn.

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
	t := p.m.Request().Tenant
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
	m     *dispatch.Member
	join  func(*dispatch.Member)
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

// fitsAt is the soonest any of l's heads would fit, as far as the
// buckets are known at now. l.held() and k.mu is held.
func (l *keyLine) fitsAt(k *Pacing, now time.Time) time.Time {
	var at time.Time
	for _, q := range l.ring {
		p := q.waiting[0]
		if t := k.Buckets.FitsAt(l.key, k.cost(p.m.Request(), cachedTokens(p.m)), now); at.IsZero() || t.Before(at) {
			at = t
		}
	}
	return at
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
