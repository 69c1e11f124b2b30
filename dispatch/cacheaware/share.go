package cacheaware

import (
	"github.com/sluicehq/sluice/dispatch"
	"time"

	"github.com/sluicehq/sluice/request"
)

// How the cache-aware release shares its registry with other replicas
// (CACHE_AWARE under GATE_BACKEND=redis).

// Share shares Release's registry with the other replicas of a
// fleet, so that a fleet behind a load balancer pays one cache write per
// prefix: the first replica to claim a cold prefix leads it fleet-wide,
// and followers on every replica wait for its response to begin.
// redisshare.CacheGroups is the one through Redis. Claim and Begun are
// bounded by a short timeout; a share that cannot be reached claims
// everything (each replica leads on its own, as without a share).
type Share interface {
	// Claim asks, of prefixes this replica does not know, which are cold
	// (now led from here for lease at most), led elsewhere, or warm: one
	// answer per prefix, in order. It is called once per wave.
	Claim(ps []SharedPrefix, lease time.Duration) []Claim
	// Begun tells the fleet that a leader here has had its response
	// begin on begun (now warm for their TTLs) and has ended without one
	// on ended (cold again).
	Begun(begun, ended []SharedPrefix)
	// Listen sets the function told of a prefix led elsewhere that has
	// begun (warm for ttl) or ended without an answer. Called once.
	Listen(f func(key uint64, ttl time.Duration, begun bool))
}

// SharedPrefix is a prefix as a Share knows it.
type SharedPrefix struct {
	Key uint64
	TTL time.Duration
}

// Claim is a Share's answer about one prefix.
type Claim uint8

const (
	ClaimLead      Claim = iota // cold: led from here
	ClaimElsewhere              // cold, its leader in flight on another replica
	ClaimWarm                   // warm
)

// addShared registers p as another replica said it is: warm, or led
// there (its followers here held until it begins, it ends, or its
// lease would have run out). c.mu is held.
func (c *Release) addShared(p request.Prefix, r *release) *prefixEntry {
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
func (c *Release) remote(key uint64, ttl time.Duration, begun bool) {
	r := release{now: time.Now()}
	promoted := map[*dispatch.Member]*prefixEntry{}
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
