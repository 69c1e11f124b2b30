package redisgate

import (
	"cmp"
	"slices"
	"time"

	"github.com/sluicehq/sluice/gate"
)

// The gate while Redis does not answer: a local cap from the last reply,
// probes, and the resync once it answers again.

// enterFallback puts the gate on its local cap (fallbackCap), and logs it
// and counts it in sluice_gate_fallback once per outage. Tickets already
// holding slots count against the local cap. g.mu is held.
func (g *Gate) enterFallback(cause error) {
	g.shared = false
	g.epoch++ // replies to scripts still in flight are ignored from now
	replicas := g.c.Options().Replicas
	seen := "GATE_REPLICAS"
	if replicas <= 0 {
		replicas, seen = max(g.snap.replicas, 1), "alive in Redis when last reached"
		if g.snap.version == 0 {
			seen = "none seen yet: set GATE_REPLICAS"
		}
	}
	g.localCap = fallbackCap(g.capacity, replicas, g.snap.held, g.snap.own)
	if !g.fellBack {
		g.fellBack = true
		g.c.Log().Warn("redis unavailable: the shared gate falls back to a local cap until it answers again",
			"gate", g.name, "redis", g.c.Addr(), "local_cap", g.localCap, "cap", g.capacity,
			"held_fleet", g.snap.held, "held_here", g.snap.own,
			"replicas", replicas, "replicas_from", seen, "error", g.c.ErrText(cause))
	}
	g.grantLocal()
}

// fallbackCap is a replica's local cap while Redis does not answer: what
// it held at its last reply (own, of the fleet's held) plus its share of
// the slots free then, max(1, ⌊free ÷ replicas⌋) when any were free.
//
// The fleet's calls in flight go on through a stall, and no replica can
// tell when another's end, so each keeps to what it had and a share of
// what nobody had. With every replica's last reply alike the local caps
// add up to the cap, but for the share of 1 given each replica when fewer
// slots than replicas were free (at most replicas − 1 over); a replica
// whose last reply is older may count as free slots another took since
// (docs/scaling.md states the bound). An evenly loaded fleet never gets a
// cap of 0: each holds as much as the others, or there was room. Before,
// each replica took ⌈cap ÷ replicas⌉ whatever the others held: one holding
// all 4 of a cap of 4 and the other taking its 2 made 6 in flight during a
// stall. A rule that also left room for the others' possible excess gave
// 0 with three or more evenly loaded replicas and served nothing at all.
func fallbackCap(capacity, replicas, held, own int) int {
	free := capacity - held
	if free <= 0 {
		return own
	}
	return own + max(1, free/replicas)
}

// probe resumes the shared gate if Redis answers.
func (g *Gate) probe() {
	if g.c.Ping() == nil {
		g.resume()
	}
}

// resume makes Redis hold what this replica holds, under a new epoch: its
// granted tickets as leases (adopted even past the cap, so that no new
// grant passes the cap while they run), its waiting ones in their order.
// The gate's lock is held through the round trip, so that nothing changes
// between what is sent and what is applied; it is rare (once per outage,
// and at start).
func (g *Gate) resume() {
	g.mu.Lock()
	if g.shared {
		g.mu.Unlock()
		return
	}
	epoch := g.epoch + 1
	var holders []any
	var waiting []*entry
	for t, e := range g.byTicket {
		if t.State() == gate.TicketGranted {
			holders = append(holders, e.id)
		} else {
			waiting = append(waiting, e)
		}
	}
	slices.SortFunc(waiting, func(a, b *entry) int { return cmp.Compare(a.place, b.place) })
	fair := "0"
	if g.fair {
		fair = "1"
	}
	args := append([]any{len(holders), fair}, holders...)
	now := time.Now()
	for _, e := range waiting {
		args = append(args, e.id, now.Sub(e.arrived).Microseconds())
		if g.fair {
			args = append(args, e.t.Key, fairCost(e.t), int(e.t.Class))
		}
	}
	r, err := g.run(resyncScript, epoch, args...)
	if err != nil {
		g.mu.Unlock()
		return
	}
	g.shared, g.epoch = true, epoch
	if g.fellBack {
		g.fellBack = false
		g.c.Log().Info("redis reachable again: the shared gate resumes", "gate", g.name, "redis", g.c.Addr(),
			"held_here", len(holders), "waiting_here", len(waiting))
	}
	g.snap = reply{} // a Redis that lost its data counts versions anew
	g.observe(r)
	drops := g.grantAll(r.granted, nil)
	g.mu.Unlock()
	g.drop(drops, epoch)
}
