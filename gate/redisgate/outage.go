package redisgate

import (
	"sync/atomic"
)

// outage is whether one shared part other than the gate (the buckets, the
// cache groups) is on its local fallback: the first Redis call of it that
// fails or times out puts it there, logged once and shown in the
// sluice_redis_fallback gauge; from then on it does not touch Redis on the
// request path, and the heartbeat's tick probes Redis and ends the outage
// when it answers.
type outage struct {
	c    *Client
	part string // "buckets" or "cache", the gauge's label
	down atomic.Bool
	// resumed, if set, runs when the outage ends, on the heartbeat's
	// goroutine.
	resumed func()
}

// up reports whether the part may use Redis.
func (o *outage) up() bool { return !o.down.Load() }

// fail starts an outage, unless one is under way.
func (o *outage) fail(err error) {
	if o.down.Swap(true) {
		return
	}
	o.c.log.Warn("redis unavailable: the shared "+o.part+" fall back to this replica's own until it answers again",
		"part", o.part, "redis", o.c.addr, "error", o.c.errText(err))
}

// probe ends the outage if Redis answers. It runs on the heartbeat's tick.
func (o *outage) probe() {
	if !o.down.Load() || o.c.ping() != nil {
		return
	}
	o.down.Store(false)
	o.c.log.Info("redis reachable again: the shared "+o.part+" resume", "part", o.part, "redis", o.c.addr)
	if o.resumed != nil {
		o.resumed()
	}
}

// gauge is 1 during an outage, else 0.
func (o *outage) gauge() float64 {
	if o.down.Load() {
		return 1
	}
	return 0
}
