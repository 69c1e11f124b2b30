package route

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
)

// Router chooses the key a request goes with. It reads the pool and
// records nothing: Pool.Route records what was chosen.
type Router interface {
	// Choose picks a key for r (nil: a request the policies know nothing
	// of, such as a count_tokens call) among cands, the keys r may use
	// now, at least one, with the pool's view at now.
	Choose(p *Pool, r *request.Descriptor, cands []*Key, now time.Time) Choice
}

// Choice is a router's pick, and why.
type Choice struct {
	Key *Key
	Why Why
}

// Why says what decided a choice, for the metrics and the access line.
type Why uint8

const (
	ByRoom     Why = iota // the key with room soonest, least loaded
	ByAffinity            // the key that holds (or is writing) its prompt prefix
	BySession             // its session's key
	InTurn                // round robin
	OnlyOne               // one key it could go to
)

var whyNames = [...]string{"room", "affinity", "session", "turn", "only"}

func (w Why) String() string { return whyNames[w] }

// Affinity is the default router (ROUTE_POLICY=affinity): a request goes
// where its prompt prefix is cached or being written, else to the key
// its session last went to, else to the key whose rate-limit buckets
// take its cost soonest, the least loaded for its weight first. It
// follows a prefix or a session only while that key takes it at most
// Pool.AffinityWait after the soonest elsewhere, and not to a key at its
// cap while another has room: a prefix then gets written on a second key
// too, which costs one cache write there and keeps the requests moving.
type Affinity struct{}

// RoundRobin takes the keys in turn, whatever they hold (ROUTE_POLICY=
// round-robin): the peers' way, kept for comparison.
type RoundRobin struct{ next atomic.Uint64 }

var (
	_ Router = Affinity{}
	_ Router = (*RoundRobin)(nil)
)

// Choose picks as the type's comment says.
func (Affinity) Choose(p *Pool, r *request.Descriptor, cands []*Key, now time.Time) Choice {
	if len(cands) == 1 {
		return Choice{cands[0], OnlyOne}
	}
	var holders uint64
	var cached int
	var session *Key
	if r != nil {
		holders, cached = p.affinity.holders(readsOf(r), now)
		session = p.sessions.of(r.Session, now)
	}
	var best, held, sess option
	for _, k := range cands {
		o := option{k: k}
		c := 0
		if holders&(1<<k.index) != 0 {
			c = cached
		}
		o.at = p.fitsAt(k, r, c, now)
		if best.better(o) {
			best = o
		}
		if c > 0 && held.better(o) {
			held = o
		}
		if k == session {
			sess = o
		}
	}
	follow := func(o option) bool {
		return o.k != nil && !o.at.After(best.at.Add(p.AffinityWait)) && (!o.k.full() || best.k.full())
	}
	switch {
	case follow(held):
		return Choice{held.k, ByAffinity}
	case follow(sess):
		return Choice{sess.k, BySession}
	}
	return Choice{best.k, ByRoom}
}

// option is one key a router weighs: when the request fits its buckets.
type option struct {
	k  *Key
	at time.Time
}

// better reports whether o beats the option held so far: it fits sooner
// (to the millisecond), or as soon and is less loaded for its weight.
func (b option) better(o option) bool {
	if b.k == nil {
		return true
	}
	bt, ot := b.at.Truncate(time.Millisecond), o.at.Truncate(time.Millisecond)
	if !ot.Equal(bt) {
		return ot.Before(bt)
	}
	return o.k.load() < b.k.load()
}

// Choose takes the next key in turn.
func (rr *RoundRobin) Choose(_ *Pool, _ *request.Descriptor, cands []*Key, _ time.Time) Choice {
	if len(cands) == 1 {
		return Choice{cands[0], OnlyOne}
	}
	return Choice{cands[(rr.next.Add(1)-1)%uint64(len(cands))], InTurn}
}

// fitsAt is when r's cost, less cached tokens read from k's cache, fits
// k's buckets; now when nothing paces the keys or r is unknown.
func (p *Pool) fitsAt(k *Key, r *request.Descriptor, cached int, now time.Time) time.Time {
	if p.room == nil || r == nil {
		return now
	}
	c := pace.Cost{Input: float64(max(r.Cost.InputTokens-cached, 1)), Output: float64(r.Cost.MaxTokens)}
	if at := p.room.FitsAt(k.Hash, c, now); at.After(now) {
		return at
	}
	return now
}

// candidates are the keys r may go to now: those allowed it that are
// healthy, other than those in avoid (they failed it already), as long
// as one is left; else the healthy ones it may use; else, every key
// being skipped, the one back soonest. None when r may use no key at all.
func (p *Pool) candidates(r *request.Descriptor, avoid []*Key, now time.Time, buf []*Key) []*Key {
	out := buf[:0]
	var healthy int
	for _, k := range p.Keys {
		if !allowed(r, k) || !k.Healthy(now) {
			continue
		}
		healthy++
		if !contains(avoid, k) {
			out = append(out, k)
		}
	}
	if len(out) > 0 {
		return out
	}
	var soonest *Key
	for _, k := range p.Keys {
		if !allowed(r, k) {
			continue
		}
		if healthy > 0 && k.Healthy(now) {
			out = append(out, k)
		}
		if soonest == nil || k.health.skippedUntil().Before(soonest.health.skippedUntil()) {
			soonest = k
		}
	}
	if len(out) == 0 && soonest != nil {
		out = append(out, soonest)
	}
	return out
}

func contains(ks []*Key, k *Key) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// Route chooses r's key with router, avoiding those in avoid while
// another may take it, and records the choice: the key's load, the
// prefixes it now holds, the session's key. It returns nil when r may use
// no key (its inbound key's backends are none of the pool's). The caller
// calls Done(k) once the request is done with k.
func (p *Pool) Route(router Router, r *request.Descriptor, avoid []*Key, now time.Time) (*Key, Why) {
	k, why, _ := p.route(router, r, avoid, now)
	return k, why
}

// route is Route that also says whether the key held r's longest prefix
// held anywhere before this choice.
func (p *Pool) route(router Router, r *request.Descriptor, avoid []*Key, now time.Time) (*Key, Why, bool) {
	var buf [8]*Key
	cands := p.candidates(r, avoid, now, buf[:])
	if len(cands) == 0 {
		return nil, ByRoom, false
	}
	c := router.Choose(p, r, cands, now)
	k := c.Key
	k.health.sent(now)
	held := false
	if r != nil && len(r.Prefixes) > 0 {
		holders, _ := p.affinity.holders(readsOf(r), now)
		held = holders&(1<<k.index) != 0
	}
	k.pending.Add(1)
	k.count.routed[c.Why].Add(1)
	if len(avoid) > 0 && avoid[len(avoid)-1] != k {
		avoid[len(avoid)-1].count.failedOver.Add(1)
	}
	if r != nil {
		p.tellWrote(k, p.affinity.wrote(r.Prefixes, k, now))
		p.sessions.went(r.Session, k, now)
	}
	return k, c.Why, held
}

// Done is a request routed to k done with it.
func (p *Pool) Done(k *Key) { k.pending.Add(-1) }

// Elsewhere reports whether a request like r, which k failed or held,
// has another key to go to about now: one it may use, healthy, whose
// buckets take it within AffinityWait. A failover goes there at once
// rather than wait out k's backoff or its retry-after.
func (p *Pool) Elsewhere(r *request.Descriptor, k *Key, now time.Time) bool {
	for _, o := range p.Keys {
		if o != k && allowed(r, o) && o.Healthy(now) && !p.fitsAt(o, r, 0, now).After(now.Add(p.AffinityWait)) {
			return true
		}
	}
	return false
}
