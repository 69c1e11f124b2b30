package redisgate

// Redis stalls (SIGSTOP, as a Redis that hangs or a network that drops
// packets) under replicas that hold slots: what the fleet holds while it
// lasts, and who is served first when it ends (issue 23, item 7).

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisconn"
)

// grants records tickets' grants in the order they came, through
// OnGrant: the event the tests wait on, instead of a time to sleep.
type grants struct {
	mu    sync.Mutex
	order []string
	held  map[string]bool
	ch    chan string
}

func newGrants() *grants { return &grants{held: map[string]bool{}, ch: make(chan string, 64)} }

// ticket is a ticket called name whose grant is recorded.
func (gr *grants) ticket(name string) *gate.Ticket {
	tk := new(gate.Ticket)
	tk.OnGrant(func() bool {
		gr.mu.Lock()
		gr.order = append(gr.order, name)
		gr.held[name] = true
		gr.mu.Unlock()
		gr.ch <- name
		return true
	})
	return tk
}

// next waits up to d for the next grant and returns its ticket's name.
func (gr *grants) next(t *testing.T, d time.Duration, what string) string {
	t.Helper()
	select {
	case name := <-gr.ch:
		return name
	case <-time.After(d):
		t.Fatalf("%s: no grant within %v (granted so far: %v)", what, d, gr.names())
		return ""
	}
}

// names are the tickets granted so far, in order.
func (gr *grants) names() []string {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	return append([]string(nil), gr.order...)
}

// release marks name's slot given back.
func (gr *grants) release(name string) {
	gr.mu.Lock()
	delete(gr.held, name)
	gr.mu.Unlock()
}

// inFlight is how many recorded tickets hold slots now.
func (gr *grants) inFlight() int {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	return len(gr.held)
}

// stallPair is two replicas a and b on one Redis sharing a gate of cap
// slots, both shared and each having seen the other alive.
func stallPair(t *testing.T, srv *redistest.Server, capacity int, ttl time.Duration) (ga, gb *Gate) {
	t.Helper()
	opt := redisconn.Options{LeaseTTL: ttl, Timeout: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))}
	a, b := redistest.Open(t, srv.URL, opt), redistest.Open(t, srv.URL, opt)
	ga = testGate(t, a, capacity)
	gb, err := New(b, ga.name, capacity)
	if err != nil {
		t.Fatal(err)
	}
	// On a loaded machine a first call may miss the 50 ms timeout: wait
	// until both are shared and have seen both replicas alive.
	for deadline := time.Now().Add(3 * time.Second); !ga.Shared() || !gb.Shared() || a.Fleet() != 2 || b.Fleet() != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not both shared with 2 replicas seen within 3 s")
		}
	}
	return ga, gb
}

// waitFallback waits until g is on its fallback cap.
func waitFallback(t *testing.T, g *Gate, what string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); g.Shared(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still shared 3 s into the stall", what)
		}
	}
}

// redisInt is the integer reply of one command to srv.
func redisInt(t *testing.T, srv *redistest.Server, args ...string) int {
	t.Helper()
	line, err := srv.Reply(args...)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(line, ":"))
	if err != nil {
		t.Fatalf("%v: reply %q", args, line)
	}
	return n
}

// TestStallHoldsTheCap: replica a holds all 4 slots of a cap of 4 and b
// has 2 tickets waiting when Redis stalls. b, on its fallback, must not
// grant them while a's calls may go on: its local cap is what it held at
// its last reply (0) plus its share of the room free then (none). With
// ⌈cap ÷ replicas⌉ it granted both at once, 6 in flight for a cap of 4
// (the figure).
func TestStallHoldsTheCap(t *testing.T) {
	srv := redistest.Start(t)
	ga, gb := stallPair(t, srv, 4, time.Second)
	gr := newGrants()
	for i := range 4 {
		ga.Join(gr.ticket("a" + strconv.Itoa(i)))
		gr.next(t, time.Second, "a's ticket")
	}
	waiting := []*gate.Ticket{gr.ticket("b0"), gr.ticket("b1")}
	for _, tk := range waiting {
		gb.Join(tk) // its reply tells b that the fleet holds 4, none of them b's
	}
	if !gb.Shared() {
		t.Skip("b fell back before the stall (a Join past the 50 ms timeout on a loaded machine)")
	}

	srv.Pause()
	defer srv.Resume()
	waitFallback(t, gb, "b")
	// b's fallback cap is in force, and granted what it grants, once
	// Shared is false: enterFallback hands out its free slots at once.
	st := gb.Stats()
	t.Logf("in flight during the stall: %d of a cap of 4 (b's local cap %d)", gr.inFlight(), st.Capacity)
	if n := gr.inFlight(); n > 4 {
		t.Errorf("the fleet holds %d slots during the stall; want at most the cap, 4", n)
	}
	if st.InFlight != 0 {
		t.Errorf("b's Stats() on the fallback = %+v; want nothing in flight while a holds the whole cap", st)
	}
}

// TestStallEvenLoadKeepsServing: three replicas hold 2 slots each of a
// cap of 6 when Redis stalls; each must go on serving its own line from
// its fallback cap, one call for each that ends (a rule that left room
// for the others' possible excess came to 0 here, and served nothing for
// the whole stall).
func TestStallEvenLoadKeepsServing(t *testing.T) {
	srv := redistest.Start(t)
	opt := redisconn.Options{LeaseTTL: time.Second, Timeout: 50 * time.Millisecond}
	cs := []*redisconn.Client{redistest.Open(t, srv.URL, opt), redistest.Open(t, srv.URL, opt), redistest.Open(t, srv.URL, opt)}
	g0 := testGate(t, cs[0], 6)
	gs := []*Gate{g0}
	for _, c := range cs[1:] {
		g, err := New(c, g0.name, 6)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	gr := newGrants()
	holders := make([][]*gate.Ticket, 3)
	for i, g := range gs {
		for j := range 2 {
			tk := gr.ticket("h" + strconv.Itoa(i) + strconv.Itoa(j))
			g.Join(tk)
			gr.next(t, time.Second, "a holder")
			holders[i] = append(holders[i], tk)
		}
	}
	for i, g := range gs { // a heartbeat's worth: each replica's last reply says 6 held by 3
		for deadline := time.Now().Add(3 * time.Second); !g.Shared() || cs[i].Fleet() != 3 || g.Stats().InFlight != 6; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("replica %d: not shared with 3 replicas and 6 held within 3 s (%+v)", i, g.Stats())
			}
		}
	}
	waiters := make([]*gate.Ticket, 3)
	srv.Pause()
	defer srv.Resume()
	for i, g := range gs {
		waiters[i] = gr.ticket("w" + strconv.Itoa(i))
		g.Join(waiters[i]) // times out: the replica falls back
		waitFallback(t, g, "replica "+strconv.Itoa(i))
	}
	if n := gr.inFlight(); n != 6 {
		t.Errorf("%d held on the fallback with each replica at 2 of its share of 2; want 6", n)
	}
	for i, g := range gs {
		if st := g.Stats(); st.Capacity < 2 {
			t.Errorf("replica %d's fallback cap is %d holding 2 of an evenly loaded cap of 6; want at least 2", i, st.Capacity)
		}
		g.Release(holders[i][0], gate.Outcome{})
		gr.release("h" + strconv.Itoa(i) + "0")
		if got := gr.next(t, time.Second, "replica "+strconv.Itoa(i)+"'s waiter once one of its calls ended"); got != "w"+strconv.Itoa(i) {
			t.Errorf("granted %s; want w%d", got, i)
		}
	}
}

// TestStallRecoveryOrder: a and b hold one slot each of a cap of 2 when
// Redis stalls for longer than the lease; during the stall a1, b1, a2,
// b2, a3, b3 arrive, in that order, alternating between the replicas.
// When Redis answers again, every replica's leases have ended and each
// resyncs at its next probe. No waiter may be granted while both
// holders' calls still run (the fleet would pass the cap), and as the
// holders end the waiters are served in their order of arrival, not one
// replica's whole line first.
func TestStallRecoveryOrder(t *testing.T) {
	const ttl = time.Second
	srv := redistest.Start(t)
	ga, gb := stallPair(t, srv, 2, ttl)
	gr := newGrants()
	ha, hb := gr.ticket("ha"), gr.ticket("hb")
	ga.Join(ha)
	gr.next(t, time.Second, "a's holder")
	gb.Join(hb)
	gr.next(t, time.Second, "b's holder")
	// a heartbeat's worth: each replica's last reply says both slots are
	// held (a's own join said 1, and the share of the free one is its
	// fallback's to take: the bound docs/scaling.md states)
	for deadline := time.Now().Add(3 * time.Second); ga.Stats().InFlight != 2 || gb.Stats().InFlight != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the replicas do not both see 2 held within 3 s (%+v, %+v)", ga.Stats(), gb.Stats())
		}
	}

	srv.Pause()
	stalled := time.Now()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	byName := map[string]*gate.Ticket{}
	for i := 1; i <= 3; i++ {
		for _, side := range []struct {
			name string
			g    *Gate
		}{{"a", ga}, {"b", gb}} {
			name := side.name + strconv.Itoa(i)
			tk := gr.ticket(name)
			byName[name] = tk
			side.g.Join(tk) // the first on each replica times out and falls back
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFallback(t, ga, "a")
	waitFallback(t, gb, "b")
	if n := gr.inFlight(); n != 2 {
		t.Fatalf("%d held on the fallback; want the 2 holders", n)
	}
	// Past the lease (0.7 × TTL since the last renewal) by half a TTL:
	// every replica's entry has ended in Redis's clock.
	time.Sleep(time.Until(stalled.Add(ttl + ttl/2)))
	srv.Resume()
	paused = false
	for deadline := time.Now().Add(5 * time.Second); !ga.Shared() || !gb.Shared(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not both shared again within 5 s of Redis answering")
		}
	}
	// Both resynced: Redis holds both holders' calls, and, if it granted
	// nothing past them, only those.
	held := redisInt(t, srv, "ZCARD", "{"+ga.name+"}:h")
	t.Logf("once both resynced, Redis holds %d slots of a cap of 2 (granted so far: %v)", held, gr.names())
	if held > 2 {
		t.Errorf("Redis holds %d slots of a cap of 2 once both replicas resynced: a waiter was granted before the other replica's calls were adopted", held)
	}
	// Serve: release the oldest holder, one at a time, and note who gets
	// its slot.
	holding := []string{"ha", "hb"}
	for len(gr.ch) > 0 { // granted at the recovery
		holding = append(holding, <-gr.ch)
	}
	tickets := map[string]*gate.Ticket{"ha": ha, "hb": hb}
	for name, tk := range byName {
		tickets[name] = tk
	}
	gateOf := func(name string) *Gate {
		if strings.HasPrefix(name, "b") || name == "hb" {
			return gb
		}
		return ga
	}
	for len(gr.names()) < 8 && len(holding) > 0 {
		name := holding[0]
		holding = holding[1:]
		gateOf(name).Release(tickets[name], gate.Outcome{})
		gr.release(name)
		select {
		case next := <-gr.ch:
			holding = append(holding, next)
		case <-time.After(2 * time.Second): // over the cap: a release frees no slot
		}
	}
	order := gr.names()[2:]
	t.Logf("after the stall, waiters granted in the order %v (arrival order a1 b1 a2 b2 a3 b3)", order)
	want := []string{"a1", "b1", "a2", "b2", "a3", "b3"}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("granted in the order %v; want their arrival order %v", order, want)
	}
	for _, name := range holding {
		gateOf(name).Release(tickets[name], gate.Outcome{})
	}
	for name, tk := range byName {
		if tk.State() == gate.TicketWaiting {
			gateOf(name).Leave(tk)
		}
	}
}

// TestFallbackCapSum checks fallbackCap's bound for every spread of up to
// the cap over up to 4 replicas, each reckoning its local cap from the
// same reply: the local caps add up to at most the cap, but when fewer
// slots than replicas were free (each then gets 1: at most replicas − 1
// over); and an evenly loaded fleet gives no replica a cap of 0.
func TestFallbackCapSum(t *testing.T) {
	for capacity := 1; capacity <= 9; capacity++ {
		for replicas := 1; replicas <= 4; replicas++ {
			h := make([]int, replicas)
			var walk func(i, left int)
			walk = func(i, left int) {
				if i < replicas {
					for x := 0; x <= left; x++ {
						h[i] = x
						walk(i+1, left-x)
					}
					return
				}
				held := capacity - left
				sum, even := 0, true
				for _, x := range h {
					l := fallbackCap(capacity, replicas, held, x)
					if l < x {
						t.Errorf("cap %d, holdings %v: a local cap of %d below the %d held", capacity, h, l, x)
					}
					sum += l
					even = even && x == h[0]
				}
				bound := capacity
				if free := capacity - held; free > 0 && free < replicas {
					bound += replicas - free
				}
				if sum > bound {
					t.Errorf("cap %d, holdings %v: the local caps add up to %d; want at most %d", capacity, h, sum, bound)
				}
				if even {
					for _, x := range h {
						if fallbackCap(capacity, replicas, held, x) == 0 {
							t.Errorf("cap %d, evenly loaded %v: a local cap of 0", capacity, h)
						}
					}
				}
			}
			walk(0, capacity)
		}
	}
}
