package redisgate

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/redisconn"
)

// Gate is one cap shared through Redis. Its tickets, their line in this
// replica and the slots they hold are kept here too, as the truth about
// this replica: Redis decides who gets a slot while it answers, and this
// replica alone, on its fallback cap, while it does not; when Redis
// answers again, resync makes Redis hold what this replica holds.
//
// Join and Release each make one Redis round trip on the caller's
// goroutine, never the gate's lock held (but resync, rare, holds it);
// a ticket of this replica freed by another's release is granted by the
// pub/sub message that reaches the client's receiver.
type Gate struct {
	c        *redisconn.Client
	name     string
	keys     []string
	channel  string // "{name}:grant:", the replica's id completes it
	capacity int
	fair     bool // GATE_ORDER=fair: the line is scored by start tags

	mu       sync.Mutex
	byTicket map[*gate.Ticket]*entry
	byID     map[string]*entry
	line     gate.Line // this replica's waiting tickets, in join order
	held     int       // slots held by this replica's tickets
	next     uint64    // ticket numbers, which are also places in line
	shared   bool      // Redis decides; else the fallback cap does
	epoch    uint64    // of the last resync; a reply of an older one is ignored
	snap     reply     // the latest reply: the shared occupancy
	localCap int       // the fallback cap, while it is in force
	fellBack bool      // the fallback was logged and counted
}

var _ gate.Gate = (*Gate)(nil)

// entry is a ticket of this replica's, by its id in Redis. It outlives
// its ticket while a script about it is in flight, so that a reply or a
// message naming it is understood.
type entry struct {
	t       *gate.Ticket
	id      string
	place   uint64
	arrived time.Time // when it joined, for its place in line after a stall
	busy    int       // scripts in flight about it
	joining bool      // its join script is in flight
	early   bool      // a grant message came while it was joining
	left    bool      // it left while joining
	done    bool      // released, left or declined
}

// fairCost is what t moves its tenant's finish tag on by in the fair
// order: its cost over its weight (each at least 1 if unset).
func fairCost(t *gate.Ticket) float64 {
	w := t.Weight
	if w <= 0 {
		w = 1
	}
	return float64(max(t.Cost, 1)) / w
}

func newGate(c *redisconn.Client, name string, capacity int) *Gate {
	tag := "{" + name + "}"
	return &Gate{c: c, name: name, capacity: capacity, channel: tag + ":grant:",
		keys:     []string{tag + ":h", tag + ":w", tag + ":wr", tag + ":r", tag + ":e", tag + ":n", tag + ":f", tag + ":s", tag + ":p", tag + ":q"},
		byTicket: map[*gate.Ticket]*entry{}, byID: map[string]*entry{}}
}

// add gives t an id and an entry. g.mu is held.
func (g *Gate) add(t *gate.Ticket) *entry {
	g.next++
	e := &entry{t: t, id: g.c.Replica() + "|" + strconv.FormatUint(g.next, 10), place: g.next, arrived: time.Now()}
	g.byTicket[t], g.byID[e.id] = e, e
	return e
}

// finish marks e's ticket done. g.mu is held.
func (g *Gate) finish(e *entry) {
	e.t.End()
	delete(g.byTicket, e.t)
	e.done = true
	g.forget(e)
}

// forget drops a done entry once no script about it is in flight. g.mu
// is held.
func (g *Gate) forget(e *entry) {
	if e.done && e.busy == 0 && g.byID[e.id] == e {
		delete(g.byID, e.id)
	}
}

// Join puts t in line, or grants it a free slot at once when nobody
// waits: one Redis round trip, or none on the fallback.
func (g *Gate) Join(t *gate.Ticket) {
	g.mu.Lock()
	if t.State() != gate.TicketNew || g.byTicket[t] != nil {
		g.mu.Unlock()
		return
	}
	e := g.add(t)
	if !g.shared {
		g.joinLocal(e)
		g.mu.Unlock()
		return
	}
	g.line.Push(t, e.place)
	e.joining = true
	e.busy++
	epoch := g.epoch
	g.mu.Unlock()

	var r reply
	var err error
	if g.fair {
		r, err = g.run(joinScript, epoch, e.id, t.Key, fairCost(t), int(t.Class))
	} else {
		r, err = g.run(joinScript, epoch, e.id)
	}

	g.mu.Lock()
	e.joining = false
	e.busy--
	var drops []*entry
	if g.ok(r, err, epoch) {
		switch {
		case e.left:
			e.busy++
			drops = append(drops, e)
		case r.status == 1 || e.early:
			drops = g.grantEntry(e, drops)
		}
		drops = g.grantAll(r.granted, drops)
	}
	g.forget(e)
	g.mu.Unlock()
	g.drop(drops, epoch)
}

// joinLocal is Join on the fallback cap. g.mu is held.
func (g *Gate) joinLocal(e *entry) {
	if g.held < g.localCap && g.line.Len() == 0 {
		if e.t.Grant() {
			g.held++
		} else {
			g.finish(e)
		}
		return
	}
	g.line.Push(e.t, e.place)
}

// Leave takes t out of line, or gives its slot back.
func (g *Gate) Leave(t *gate.Ticket) bool {
	g.mu.Lock()
	e := g.byTicket[t]
	if e == nil {
		g.mu.Unlock()
		return false
	}
	had := t.State() == gate.TicketGranted
	if had {
		g.held--
	} else {
		g.line.Remove(t)
	}
	g.giveBack(e, had)
	return had
}

// Release gives back t's slot; the next in line, here or on another
// replica, gets it.
func (g *Gate) Release(t *gate.Ticket, _ gate.Outcome) {
	g.mu.Lock()
	e := g.byTicket[t]
	if e == nil || t.State() != gate.TicketGranted {
		g.mu.Unlock()
		return
	}
	g.held--
	g.giveBack(e, true)
}

// giveBack finishes e, which held a slot or has just left the line, and
// tells Redis. g.mu is held, and unlocked on return.
func (g *Gate) giveBack(e *entry, hadSlot bool) {
	if !g.shared {
		g.finish(e)
		if hadSlot {
			g.grantLocal()
		}
		g.mu.Unlock()
		return
	}
	if e.joining { // its join, in flight, keeps the entry, and drops it on return
		e.left = true
		g.finish(e)
		g.mu.Unlock()
		return
	}
	e.busy++
	g.finish(e)
	epoch := g.epoch
	g.mu.Unlock()
	g.drop([]*entry{e}, epoch)
}

// drop takes each entry's id out of Redis, one round trip each, and grants
// what its reply grants; a ticket that declines its slot is dropped in
// turn. Each entry's busy count was raised for it.
func (g *Gate) drop(es []*entry, epoch uint64) {
	for len(es) > 0 {
		e := es[0]
		es = es[1:]
		r, err := g.run(dropScript, epoch, e.id)
		g.mu.Lock()
		e.busy--
		g.forget(e)
		if g.ok(r, err, epoch) {
			es = g.grantAll(r.granted, es)
		}
		g.mu.Unlock()
	}
}

// grantAll grants the tickets of ids, which Redis says hold slots; it
// returns drops with the entries to take out of Redis again added (ids no
// ticket of this replica's has any more, tickets that declined). g.mu is
// held.
func (g *Gate) grantAll(ids []string, drops []*entry) []*entry {
	for _, id := range ids {
		e := g.byID[id]
		switch {
		case e == nil: // its ticket is gone: the lease is an orphan
			drops = append(drops, &entry{id: id, busy: 1, done: true})
		case e.joining:
			e.early = true
		default:
			drops = g.grantEntry(e, drops)
		}
	}
	return drops
}

// grantEntry grants e's ticket if it still waits. g.mu is held.
func (g *Gate) grantEntry(e *entry, drops []*entry) []*entry {
	if e.done || e.t.State() != gate.TicketWaiting {
		return drops
	}
	g.line.Remove(e.t)
	if e.t.Grant() {
		g.held++
		return drops
	}
	e.busy++
	g.finish(e)
	return append(drops, e)
}

// grantLocal hands free fallback slots to the line, first in line first.
// g.mu is held.
func (g *Gate) grantLocal() {
	for g.held < g.localCap {
		t := g.line.Front()
		if t == nil {
			return
		}
		g.line.Remove(t)
		if t.Grant() {
			g.held++
		} else {
			g.finish(g.byTicket[t])
		}
	}
}

// grantedElsewhere is a grant message: another replica's release, or a
// heartbeat's reaping, gave id a slot.
func (g *Gate) grantedElsewhere(id string) {
	g.mu.Lock()
	if !g.shared {
		g.mu.Unlock()
		return // resync will tell Redis what this replica holds
	}
	epoch := g.epoch
	drops := g.grantAll([]string{id}, nil)
	g.mu.Unlock()
	g.drop(drops, epoch)
}

// ok says whether r, the reply to a script sent under epoch, is to be
// applied, and records its snapshot; an error, or a stale epoch, puts the
// gate on its fallback. g.mu is held.
func (g *Gate) ok(r reply, err error, epoch uint64) bool {
	if !g.shared || epoch != g.epoch {
		return false // the fallback, or a resync, came since it was sent
	}
	if err == nil && r.stale {
		err = errors.New("this replica's leases were reaped, or Redis lost its data")
	}
	if err != nil {
		g.enterFallback(err)
		return false
	}
	g.observe(r)
	return true
}

// observe keeps r's occupancy if it is the latest seen. g.mu is held.
func (g *Gate) observe(r reply) {
	if r.version > g.snap.version {
		g.snap = r
	}
	g.c.SawReplicas(r.replicas)
}

// heartbeat renews the lease and grants what the reply says this
// replica's tickets hold but no message brought (one lost while the
// subscription reconnected).
func (g *Gate) heartbeat() {
	g.mu.Lock()
	epoch := g.epoch
	g.mu.Unlock()
	r, err := g.run(beatScript, epoch)
	g.mu.Lock()
	var drops []*entry
	if g.ok(r, err, epoch) {
		drops = g.grantAll(r.granted, nil)
		for _, id := range r.mine {
			if e := g.byID[id]; e == nil || e.busy == 0 {
				drops = g.grantAll([]string{id}, drops)
			}
		}
	}
	g.mu.Unlock()
	g.drop(drops, epoch)
}

func (g *Gate) isShared() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shared
}

// Shared reports whether the shared gate is in force (Redis answers), as
// against the local fallback cap.
func (g *Gate) Shared() bool { return g.isShared() }

// Stats is the latest shared occupancy Redis reported (the whole fleet's
// slots held and tickets waiting), or on the fallback this replica's own
// against its local cap. It does no I/O.
func (g *Gate) Stats() gate.Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shared {
		return gate.Stats{Capacity: g.capacity, InFlight: g.snap.held, Waiting: g.snap.waiting}
	}
	return gate.Stats{Capacity: g.localCap, InFlight: g.held, Waiting: g.line.Len()}
}

// reply is a script's answer.
type reply struct {
	stale                   bool
	status                  int64
	version                 int64
	held, waiting, replicas int
	own                     int      // slots held by the caller's tickets
	granted                 []string // this replica's tickets granted
	mine                    []string // the heartbeat's: this replica's lease ids
}

func parseReply(v []any) (reply, error) {
	var r reply
	num := func(i int) int64 {
		if i < len(v) {
			n, _ := v[i].(int64)
			return n
		}
		return 0
	}
	if num(0) == -1 {
		return reply{stale: true}, nil
	}
	if len(v) < 6 {
		return r, fmt.Errorf("redisgate: a reply of %d values", len(v))
	}
	r.status, r.version = num(0), num(1)
	r.held, r.waiting, r.replicas, r.own = int(num(2)), int(num(3)), int(num(4)), int(num(5))
	into := &r.granted
	for _, x := range v[6:] {
		switch x := x.(type) {
		case string:
			*into = append(*into, x)
		case int64: // the heartbeat's marker
			into = &r.mine
		}
	}
	return r, nil
}
