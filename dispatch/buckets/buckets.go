// Package buckets is the pacing by token buckets per upstream key
// (RATE_LIMIT_PACING=buckets, the default): a dispatch.Pacing that debits
// each member's estimated cost from its key's buckets (package pace) as it
// goes to the gate, and holds it outside the gate, in its key's line, when
// the cost does not fit. It keeps its debit of each member in a
// dispatch.Note, and uses only dispatch's exported seams (Member.Request,
// ExpectedRead; the live and join functions Pace is given).
package buckets

import (
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
)

var _ Store = (*pace.Buckets)(nil)

// Pacing is the Pacing by token buckets per upstream key (package
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
type Pacing struct {
	Buckets Store
	// Held, if set, is called with how long a member was held each time
	// a held member goes. It must be quick.
	Held func(d time.Duration)

	mu    sync.Mutex
	lines map[string]*keyLine
}

var _ dispatch.Pacing = (*Pacing)(nil)

// cost is what m is estimated to spend.
func (k *Pacing) cost(r *request.Descriptor, cached int) pace.Cost {
	return pace.Cost{
		Input:  float64(max(r.Cost.InputTokens-cached, 1)),
		Output: float64(r.Cost.MaxTokens),
	}
}

// cachedTokens is how much of m's prompt is expected to be read from the
// cache, as its releaser said (Member.ExpectRead: the prefix a follower
// followed, or the one found warm; not its longest prefix, since a
// request that reads a warm prefix and marks a longer one writes the
// rest, which the input limit counts); none on a key that holds none of
// it.
func cachedTokens(m *dispatch.Member) int { return m.ExpectedRead() }

// Pace debits m and joins it now if its key's line is empty and its cost
// fits, and otherwise holds it at the back of its tenant's queue in its
// key's line.
func (k *Pacing) Pace(m *dispatch.Member, join func(*dispatch.Member), live func() bool) {
	now := time.Now()
	key := m.Request().PaceKey()
	c := k.cost(m.Request(), cachedTokens(m))
	k.mu.Lock()
	l := k.lines[key]
	if l != nil {
		l.prune()
	}
	if l == nil || !l.held() {
		d, ok, at := k.Buckets.Take(key, c, now)
		if ok {
			sp := spendNote.Make(m)
			*sp = spend{debit: d, held: sp.held}
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

// arm makes l's timer fire at t. k.mu is held.
func (k *Pacing) arm(l *keyLine, t time.Time) {
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
func (k *Pacing) wake(l *keyLine) {
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
func (k *Pacing) serve(l *keyLine, now time.Time) []pacedMember {
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
		sp := spendNote.Make(p.m)
		*sp = spend{debit: d, held: sp.held + now.Sub(p.since)}
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
func (k *Pacing) pick(l *keyLine, now time.Time) (int, pace.Debit, time.Time) {
	n := len(l.ring)
	for j := range n {
		i := (l.turn + j) % n
		p := &l.ring[i].waiting[0]
		if p.failed.IsZero() || now.Before(p.reserve) {
			continue
		}
		d, ok, at := k.Buckets.Take(l.key, k.cost(p.m.Request(), cachedTokens(p.m)), now)
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
		c := k.cost(p.m.Request(), cachedTokens(p.m))
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
func (k *Pacing) release(out []pacedMember, now time.Time) {
	for _, p := range out {
		if k.Held != nil {
			k.Held(now.Sub(p.since))
		}
		p.join(p.m)
	}
}

// Settle learns the key's limits from the answer's headers. A refusal
// gives the member's tokens back, and a 429 its request too, since the
// upstream counted neither; a 429's retry-after holds the key (its line's
// timer finds the hold when it next fires).
func (k *Pacing) Settle(m *dispatch.Member, status int, h http.Header) {
	now := time.Now()
	sp := spendNote.Make(m) // made in Pace, before the member could call
	k.Buckets.Observe(m.Request().PaceKey(), sp.debit, status, h, now)
	if !sp.settled {
		sp.settled = true
		switch {
		case status == http.StatusTooManyRequests:
			k.Buckets.Refund(sp.debit, now)
		case status >= 300:
			k.Buckets.Correct(sp.debit, pace.Cost{}, now)
		}
	}
	k.recheck(m.Request().PaceKey(), now)
}

// Used corrects m's debit to its answer's usage.
func (k *Pacing) Used(m *dispatch.Member, u dispatch.Usage) {
	sp := spendNote.Peek(m)
	if sp == nil {
		return // never paced: nothing was debited
	}
	k.mu.Lock()
	sp.settled = true // an answer's usage is its settling: End gives nothing back
	k.mu.Unlock()
	now := time.Now()
	k.Buckets.Correct(sp.debit, pace.Cost{Input: float64(u.Input + u.CacheWrite), Output: float64(u.Output)}, now)
	k.recheck(m.Request().PaceKey(), now)
}

// End gives back a debit that no answer settled: the call never reached
// the upstream, or got no answer.
func (k *Pacing) End(m *dispatch.Member) {
	// Under k.mu: a requeued member that left while its key's line let it
	// go (Member.Requeue) may have been debited by wake just now.
	k.mu.Lock()
	var debit pace.Debit
	sp := spendNote.Peek(m)
	refund := sp != nil && !sp.settled // nil: never paced, nothing debited
	if sp != nil {
		debit, sp.settled = sp.debit, true
	}
	k.mu.Unlock()
	if refund {
		now := time.Now()
		k.Buckets.Refund(debit, now)
		k.recheck(m.Request().PaceKey(), now)
	}
}

// recheck re-arms key's line, if it holds anyone, for when its heads fit
// now that an answer has changed what the buckets hold: the unused part
// of a max_tokens given back at an answer's end, a refusal's refund or
// headers that raise the estimate. The timer was armed for the refill
// alone, which for a key limited on output tokens, whose requests give
// back most of their max_tokens, was tens of seconds late.
func (k *Pacing) recheck(key string, now time.Time) {
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
func (k *Pacing) Holds(r *request.Descriptor) bool {
	now := time.Now()
	k.mu.Lock()
	l := k.lines[r.PaceKey()]
	held := l != nil && l.holds(r.Tenant, now)
	k.mu.Unlock()
	return held || k.Buckets.FitsAt(r.PaceKey(), k.cost(r, 0), now).After(now)
}

// Levels is what each key's buckets hold now, for the metrics.
func (k *Pacing) Levels(now time.Time) []pace.Level { return k.Buckets.Levels(now) }

// HeldUntil is when a request like r would fit in its key's buckets, as
// far as is known now.
func (k *Pacing) HeldUntil(r *request.Descriptor) time.Time {
	return k.Buckets.FitsAt(r.PaceKey(), k.cost(r, 0), time.Now())
}

// Store keeps the model of each upstream key's rate-limit buckets
// that buckets.Pacing paces by: a *pace.Buckets in this process, or one that
// every replica shares (redisshare.Buckets). Its methods are pace.Buckets'.
type Store interface {
	Take(key string, c pace.Cost, now time.Time) (pace.Debit, bool, time.Time)
	FitsAt(key string, c pace.Cost, now time.Time) time.Time
	Refund(d pace.Debit, now time.Time)
	Correct(d pace.Debit, spent pace.Cost, now time.Time)
	Observe(key string, d pace.Debit, status int, h http.Header, now time.Time)
	Levels(now time.Time) []pace.Level
}

// spend is a member's debit of its key's buckets.
type spend struct {
	debit   pace.Debit
	settled bool          // an answer came: End gives nothing back
	held    time.Duration // how long Pace held it, in all
}

// Waited is how long m was held for its key's rate limits. Read it from
// the member's function.
func (k *Pacing) Waited(m *dispatch.Member) time.Duration {
	if sp := spendNote.Peek(m); sp != nil {
		return sp.held
	}
	return 0
}

// spendNote is buckets.Pacing' record of each member it paced.
var spendNote = dispatch.NewNote[spend]()
