// Package redisgate is a gate.Gate shared by every sluice replica that
// points at one Redis: one cap across the fleet, granted in global arrival
// order. Slots are leases that a replica's heartbeat renews, so a crashed
// replica's slots come back within the lease TTL; acquire and release are
// Lua scripts, atomic in Redis; a grant to a ticket of another replica
// reaches it by pub/sub. When Redis cannot be reached within a short
// timeout, each replica falls back to a local cap (what it held at its
// last reply, plus its share of the slots free then) and returns to the
// shared gate when Redis answers again; after a stall longer than the
// lease, grants wait until the replicas have resynced, and the line is
// in arrival order across them. The connection,
// its heartbeat tick and its subscription are redisconn's, shared with
// the other parts replicas share (redisshare). docs/scaling.md tells how
// to run it and how far it carries.
package redisgate

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redisconn"
)

// New returns the shared gate called name on c (every replica that names
// the same gate shares its cap), of capacity slots. It is registered with
// Redis now if Redis answers, and on the next heartbeat otherwise.
func New(c *redisconn.Client, name string, capacity int) (*Gate, error) {
	return open(c, name, capacity, false)
}

// NewFair is New in the fair order across tenants (GATE_ORDER=fair): its
// line is scored by each ticket's start tag, reckoned in Redis from each
// tenant's finish tag, so that one tenant's burst on one replica cannot
// starve another tenant on another (docs/scaling.md).
func NewFair(c *redisconn.Client, name string, capacity int) (*Gate, error) {
	return open(c, name, capacity, true)
}

func open(c *redisconn.Client, name string, capacity int, fair bool) (*Gate, error) {
	if capacity < 1 {
		return nil, errors.New("gate: capacity must be at least 1")
	}
	g := newGate(c, name, capacity)
	g.fair = fair
	if !c.Handle(g.channel+c.Replica(), g.grantedElsewhere) {
		return nil, fmt.Errorf("redisgate: gate %q opened twice", name)
	}
	c.OnTick(g.tick)
	c.OnClose(func() { g.run(byeScript, 0) })
	if c.Subscribe(g.channel+c.Replica()) == nil { // remembered, and renewed on reconnect, even if it fails now
		g.resume()
	}
	if !g.isShared() {
		g.mu.Lock()
		g.enterFallback(errors.New("not reached at start"))
		g.mu.Unlock()
	}
	return g, nil
}

// tick is the gate's part of the heartbeat: on its fallback it probes
// Redis and resumes the shared gate; shared, it renews its lease and
// reconciles its grants every heartbeat.
func (g *Gate) tick(heartbeat bool) {
	if !g.isShared() {
		g.probe()
	} else if heartbeat {
		g.heartbeat()
	}
}

// run calls script with the gate's keys and the common arguments, under
// the timeout, and parses its reply.
func (g *Gate) run(s *redis.Script, epoch uint64, extra ...any) (reply, error) {
	args := make([]any, 0, 5+len(extra))
	args = append(args, g.c.Replica(), epoch, g.capacity, g.c.Lease().Milliseconds(), g.channel)
	args = append(args, extra...)
	v, err := g.c.Eval(s, g.keys, args...)
	if err != nil {
		return reply{}, err
	}
	return parseReply(v)
}

// Collectors are the gate's metrics, for a Prometheus registry:
// sluice_gate_fallback (docs/metrics.md). The connection's are
// redisconn.Client.Collectors.
func (g *Gate) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_gate_fallback",
			Help: "1 while the shared gate cannot reach Redis and this replica runs on its local fallback cap (what it held at its last reply plus its share of the slots free then), else 0."},
			func() float64 {
				if g.onFallback() {
					return 1
				}
				return 0
			}),
	}
}

// onFallback reports whether the fallback is in force and was logged:
// what sluice_gate_fallback shows.
func (g *Gate) onFallback() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fellBack
}
