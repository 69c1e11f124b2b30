package redisgate

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisconn"
)

// waitReady waits up to d for t's slot and reports how long it took.
func waitReady(t *testing.T, tk *gate.Ticket, d time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-tk.Ready():
		return 0
	default:
	}
	select {
	case <-tk.Ready():
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("%s: no slot within %v", what, d)
		return 0
	}
}

func notReady(t *testing.T, tk *gate.Ticket, what string) {
	t.Helper()
	select {
	case <-tk.Ready():
		t.Fatalf("%s holds a slot; want it waiting", what)
	default:
	}
}

// TestGrantsAcrossReplicas has two replicas share a cap of 2: a slot
// freed on one goes to the longest waiter, whichever replica it is on.
func TestGrantsAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	a, b := redistest.Open(t, srv.URL, redisconn.Options{}), redistest.Open(t, srv.URL, redisconn.Options{})
	ga, gb := testGate(t, a, 2), (*Gate)(nil)
	gb, err := New(b, ga.name, 2)
	if err != nil {
		t.Fatal(err)
	}
	h1, h2 := new(gate.Ticket), new(gate.Ticket)
	ga.Join(h1)
	gb.Join(h2)
	waitReady(t, h1, time.Second, "first")
	waitReady(t, h2, time.Second, "second")
	// Arrival order: b1, a1, b2.
	b1, a1, b2 := new(gate.Ticket), new(gate.Ticket), new(gate.Ticket)
	gb.Join(b1)
	ga.Join(a1)
	gb.Join(b2)
	if st := gb.Stats(); st != (gate.Stats{Capacity: 2, InFlight: 2, Waiting: 3}) {
		t.Errorf("Stats() = %+v; want the fleet's {2 2 3}", st)
	}
	ga.Release(h1, gate.Outcome{}) // a's slot goes to b1, by pub/sub
	waitReady(t, b1, time.Second, "b1, first in line, on the other replica")
	notReady(t, a1, "a1")
	gb.Release(h2, gate.Outcome{}) // b's slot goes to a1
	waitReady(t, a1, time.Second, "a1, next in line, on the other replica")
	notReady(t, b2, "b2")
	ga.Release(a1, gate.Outcome{})
	waitReady(t, b2, time.Second, "b2")
	gb.Release(b1, gate.Outcome{})
	gb.Release(b2, gate.Outcome{})
	if st := gb.Stats(); st != (gate.Stats{Capacity: 2}) {
		t.Errorf("Stats() after all released = %+v; want {2 0 0}", st)
	}
}

// TestCrashedReplicaSlotsReturn kills a replica holding every slot: its
// leases end within the TTL and the other replica's waiter gets a slot.
func TestCrashedReplicaSlotsReturn(t *testing.T) {
	const ttl = time.Second
	srv := redistest.Start(t)
	a, b := redistest.Open(t, srv.URL, redisconn.Options{LeaseTTL: ttl}), redistest.Open(t, srv.URL, redisconn.Options{LeaseTTL: ttl})
	ga := testGate(t, a, 2)
	gb, err := New(b, ga.name, 2)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		tk := new(gate.Ticket)
		ga.Join(tk)
		waitReady(t, tk, time.Second, "a's ticket")
	}
	w1, w2 := new(gate.Ticket), new(gate.Ticket)
	gb.Join(w1)
	gb.Join(w2)
	// Two heartbeats of a's (its only Redis calls now): its leases are
	// renewed, not left to lapse, and b's waiter still waits.
	for calls, deadline := a.RoundTrips(), time.Now().Add(5*time.Second); a.RoundTrips() < calls+2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a made no two heartbeats in 5 s")
		}
	}
	notReady(t, w1, "b's waiter while a lives")
	a.Crash()
	took := waitReady(t, w1, 2*ttl, "b's first waiter after a was killed")
	waitReady(t, w2, 100*time.Millisecond, "b's second waiter")
	if took > ttl+100*time.Millisecond {
		t.Errorf("a's slots came back %v after it was killed; want within the lease TTL of %v", took, ttl)
	}
	t.Logf("a's slots came back %v after it was killed (lease TTL %v)", took, ttl)
	if st := gb.Stats(); st.InFlight != 2 || st.Waiting != 0 {
		t.Errorf("Stats() = %+v; want b's 2 held, none waiting", st)
	}
}

// TestFallbackAndResume stops Redis under two replicas with a cap of 4:
// each falls back to ⌈4 ÷ 2⌉ = 2 within the timeout, and when Redis comes
// back (empty, as after a crash) each resyncs what it holds and the
// shared cap is in force again.
func TestFallbackAndResume(t *testing.T) {
	const timeout = 50 * time.Millisecond
	srv := redistest.Start(t)
	opt := redisconn.Options{LeaseTTL: time.Second, Timeout: timeout, Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))}
	a, b := redistest.Open(t, srv.URL, opt), redistest.Open(t, srv.URL, opt)
	ga := testGate(t, a, 4)
	gb, err := New(b, ga.name, 4)
	if err != nil {
		t.Fatal(err)
	}
	held := new(gate.Ticket)
	ga.Join(held)
	waitReady(t, held, time.Second, "a's first ticket")
	// Both shared, and a has seen both replicas alive: on a loaded machine
	// a first call may miss the 50 ms timeout, and the fallback cap is
	// reckoned from the replicas last seen.
	for deadline := time.Now().Add(3 * time.Second); !ga.Shared() || !gb.Shared() || a.Fleet() != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not both shared with 2 replicas seen within 3 s (a shared %v, b shared %v, replicas %d)", ga.Shared(), gb.Shared(), a.Fleet())
		}
	}

	srv.Pause() // Redis hangs: every call must give up at the timeout
	start := time.Now()
	ts := []*gate.Ticket{new(gate.Ticket), new(gate.Ticket), new(gate.Ticket)}
	for _, tk := range ts {
		ga.Join(tk)
	}
	if d := time.Since(start); d > timeout+50*time.Millisecond {
		t.Errorf("three Joins with Redis hung took %v; want about one timeout, %v", d, timeout)
	}
	if ga.Shared() {
		t.Fatal("the gate is still shared with Redis hung")
	}
	// a's local cap is 2: the ticket it held counts, so one more gets a slot.
	waitReady(t, ts[0], 0, "a's second ticket on the fallback")
	notReady(t, ts[1], "a's third ticket, past the fallback cap")
	if st := ga.Stats(); st != (gate.Stats{Capacity: 2, InFlight: 2, Waiting: 2}) {
		t.Errorf("Stats() on the fallback = %+v; want {2 2 2}", st)
	}
	if !ga.onFallback() {
		t.Error("sluice_gate_fallback is not 1 on the fallback")
	}
	srv.Stop()    // killed while hung
	srv.Restart() // empty: every lease and place in line is gone
	// A replica that did not notice the outage finds its epoch gone at its
	// next heartbeat and resyncs too: wait until both stay shared for
	// three heartbeats.
	deadline := time.Now().Add(3 * time.Second)
	for stable := time.Now(); time.Since(stable) < 3*opt.LeaseTTL/4; time.Sleep(10 * time.Millisecond) {
		if !ga.Shared() || !gb.Shared() {
			stable = time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatal("the shared gate did not resume within 3 s of Redis coming back")
		}
	}
	// Redis now holds a's two leases and its two waiters, in their order:
	// with a cap of 4 both get slots.
	waitReady(t, ts[1], time.Second, "a's third ticket once shared")
	waitReady(t, ts[2], time.Second, "a's fourth ticket once shared")
	late := new(gate.Ticket)
	gb.Join(late)
	notReady(t, late, "b's ticket with a holding all 4 slots")
	if st := gb.Stats(); st != (gate.Stats{Capacity: 4, InFlight: 4, Waiting: 1}) {
		t.Errorf("Stats() once shared again = %+v; want {4 4 1}", st)
	}
	gb.Leave(late)
	if ga.onFallback() {
		t.Error("sluice_gate_fallback is not 0 once shared again")
	}
	for _, tk := range append(ts, held) {
		ga.Release(tk, gate.Outcome{})
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			tk := new(gate.Ticket)
			gb.Join(tk)
			waitReady(t, tk, time.Second, "b's ticket after a released")
			gb.Release(tk, gate.Outcome{})
		})
	}
	wg.Wait()
}

// tWriter writes to the test's log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// TestFairAcrossReplicas: tenant a bursts 40 tickets on one replica; then
// tenant b, on another replica, asks for 4. With the fair order shared,
// b's tickets are granted within the next few slots (alternating with
// a's), not after a's 40; the FIFO gate serves a's burst first.
func TestFairAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	for _, fair := range []bool{true, false} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			ca, cb := redistest.Open(t, srv.URL, redisconn.Options{}), redistest.Open(t, srv.URL, redisconn.Options{})
			name := redistest.Name()
			opener := func(c *redisconn.Client) func(string, int) (*Gate, error) {
				if fair {
					return func(name string, capacity int) (*Gate, error) { return NewFair(c, name, capacity) }
				}
				return func(name string, capacity int) (*Gate, error) { return New(c, name, capacity) }
			}
			ga, err := opener(ca)(name, 2)
			if err != nil {
				t.Fatal(err)
			}
			gb, err := opener(cb)(name, 2)
			if err != nil {
				t.Fatal(err)
			}
			var as, bs []*gate.Ticket
			for range 40 {
				tk := &gate.Ticket{Key: "a", Cost: 1000}
				ga.Join(tk)
				as = append(as, tk)
			}
			for range 4 {
				tk := &gate.Ticket{Key: "b", Cost: 1000}
				gb.Join(tk)
				bs = append(bs, tk)
			}
			// Serve: each round releases a's oldest holder, or b's, and
			// counts the grants until all of b's hold a slot.
			grants := 2 // a's first two were granted at once
			held := []*gate.Ticket{as[0], as[1]}
			released := map[*gate.Ticket]bool{}
			waitReady(t, as[0], time.Second, "a's first")
			waitReady(t, as[1], time.Second, "a's second")
			bDone := func() bool {
				for _, tk := range bs {
					if !ready(tk) {
						return false
					}
				}
				return true
			}
			for !bDone() && grants < 44 {
				tk := held[0]
				held = held[1:]
				g := ga
				if tk.Key == "b" {
					g = gb
				}
				g.Release(tk, gate.Outcome{})
				released[tk] = true
				// The next grant: whichever ticket gets the freed slot.
				deadline := time.Now().Add(time.Second)
				for {
					var next *gate.Ticket
					for _, x := range append(append([]*gate.Ticket{}, as...), bs...) {
						if ready(x) && !contains(held, x) && !released[x] {
							next = x
							break
						}
					}
					if next != nil {
						held = append(held, next)
						grants++
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("no grant within 1 s of a release (grants so far %d)", grants)
					}
					time.Sleep(time.Millisecond)
				}
			}
			t.Logf("fair=%v: b's 4 tickets all granted by grant %d of 44", fair, grants)
			if fair && grants > 2+8+1 {
				t.Errorf("b's 4 tickets took %d grants; want them within about 8 (alternating with a's)", grants)
			}
			if !fair && grants < 44 {
				t.Errorf("FIFO granted b's 4 tickets by grant %d; want them after a's 40", grants)
			}
			for _, x := range append(as, bs...) {
				if released[x] {
					continue
				}
				if ready(x) {
					if x.Key == "b" {
						gb.Release(x, gate.Outcome{})
					} else {
						ga.Release(x, gate.Outcome{})
					}
				} else {
					if x.Key == "b" {
						gb.Leave(x)
					} else {
						ga.Leave(x)
					}
				}
			}
		})
	}
}

// ready reports whether tk has been granted a slot (its Ready is closed).
func ready(tk *gate.Ticket) bool {
	select {
	case <-tk.Ready():
		return true
	default:
		return false
	}
}

func contains(ts []*gate.Ticket, t *gate.Ticket) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}
