package redisconn

import (
	"sync/atomic"
)

// Outage is whether one shared part other than the gate (the buckets, the
// cache groups) is on its local fallback: the first Redis call of it that
// fails or times out puts it there, logged once and shown in the
// sluice_redis_fallback gauge; from then on it does not touch Redis on the
// request path, and the heartbeat's tick probes Redis and ends the outage
// when it answers.
type Outage struct {
	c    *Client
	part string // "buckets" or "cache", the gauge's label
	down atomic.Bool
}

// Outage returns the outage of the shared part called part (the gauge's
// label), probed on every tick while it lasts.
func (c *Client) Outage(part string) *Outage {
	o := &Outage{c: c, part: part}
	c.mu.Lock()
	c.parts = append(c.parts, o)
	c.mu.Unlock()
	c.OnTick(func(bool) { o.Probe() })
	return o
}

// Up reports whether the part may use Redis.
func (o *Outage) Up() bool { return !o.down.Load() }

// Fail starts an outage, unless one is under way.
func (o *Outage) Fail(err error) {
	if o.down.Swap(true) {
		return
	}
	o.c.log.Warn("redis unavailable: the shared "+o.part+" fall back to this replica's own until it answers again",
		"part", o.part, "redis", o.c.addr, "error", o.c.ErrText(err))
}

// Probe ends the outage if Redis answers. It runs on the heartbeat's tick.
func (o *Outage) Probe() {
	if !o.down.Load() || o.c.Ping() != nil {
		return
	}
	o.down.Store(false)
	o.c.log.Info("redis reachable again: the shared "+o.part+" resume", "part", o.part, "redis", o.c.addr)
}

// gauge is 1 during an outage, else 0.
func (o *Outage) gauge() float64 {
	if o.down.Load() {
		return 1
	}
	return 0
}
