package redisgate

import (
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestStallHoldsTheCap: replica a holds all 4 slots of a cap of 4 and b
// has 2 tickets waiting when Redis stalls (SIGSTOP) for longer than a
// lease. b, on its fallback, must not grant them while a's calls go on:
// with ⌈cap ÷ replicas⌉ it granted both at once, 6 in flight for a cap of
// 4. Once Redis answers again b's tickets get the slots a gave back.
func TestStallHoldsTheCap(t *testing.T) {
	const timeout = 50 * time.Millisecond
	srv := redistest.Start(t)
	opt := Options{LeaseTTL: time.Second, Timeout: timeout, Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))}
	a, b := open(t, srv.URL, opt), open(t, srv.URL, opt)
	ga := testGate(t, a, 4)
	gb, err := b.Gate(ga.name, 4)
	if err != nil {
		t.Fatal(err)
	}
	held := []*gate.Ticket{new(gate.Ticket), new(gate.Ticket), new(gate.Ticket), new(gate.Ticket)}
	for _, tk := range held {
		ga.Join(tk)
		waitReady(t, tk, time.Second, "a's ticket")
	}
	for deadline := time.Now().Add(3 * time.Second); !ga.Shared() || !gb.Shared() || b.replicas.Load() != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not both shared with 2 replicas seen within 3 s")
		}
	}
	waiting := []*gate.Ticket{new(gate.Ticket), new(gate.Ticket)}
	for _, tk := range waiting {
		gb.Join(tk) // its reply tells b that the fleet holds 4
		notReady(t, tk, "b's ticket with a holding all 4 slots")
	}
	if !gb.Shared() {
		t.Fatal("b fell back before the stall (a Join past the 50 ms timeout on a loaded machine); rerun")
	}

	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	// b's heartbeat (every TTL/4) times out and puts it on its fallback.
	for deadline := time.Now().Add(3 * time.Second); gb.Shared(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b still shared 3 s into the stall")
		}
	}
	// a's calls are still in flight: b may grant nothing.
	time.Sleep(300 * time.Millisecond)
	for _, tk := range waiting {
		notReady(t, tk, "b's ticket on its fallback while a holds the whole cap")
	}
	if st := gb.Stats(); st.InFlight != 0 {
		t.Errorf("b's Stats() on the fallback = %+v; want nothing in flight", st)
	}
	// Redis stalled past the lease TTL: a gives back 2 of its 4.
	time.Sleep(time.Second)
	for _, tk := range held[:2] {
		ga.Release(tk, gate.Outcome{})
	}
	srv.Resume()
	paused = false
	for _, tk := range waiting {
		waitReady(t, tk, 5*time.Second, "b's ticket once Redis answers again and a gave 2 back")
	}
	for _, tk := range held[2:] {
		ga.Release(tk, gate.Outcome{})
	}
	for _, tk := range waiting {
		gb.Release(tk, gate.Outcome{})
	}
}

// TestFallbackCapHoldsTheSum checks fallbackCap's claim: for any holdings
// of up to the cap spread over the replicas, each replica's local cap
// reckoned from the others' total, the most the fleet can hold on the
// fallback (each replica the larger of what it held and its local cap) is
// at most the cap.
func TestFallbackCapHoldsTheSum(t *testing.T) {
	for capacity := 1; capacity <= 9; capacity++ {
		for replicas := 1; replicas <= 4; replicas++ {
			h := make([]int, replicas)
			var walk func(i, left int)
			walk = func(i, left int) {
				if i == replicas {
					total := 0
					for _, x := range h {
						total += x
					}
					most := 0
					for _, x := range h {
						most += max(x, fallbackCap(capacity, replicas, total-x))
					}
					if most > capacity {
						t.Errorf("cap %d, holdings %v: the fleet may hold %d on the fallback", capacity, h, most)
					}
					return
				}
				for x := 0; x <= left; x++ {
					h[i] = x
					walk(i+1, left-x)
				}
			}
			walk(0, capacity)
		}
	}
	if got := fallbackCap(4, 2, 0); got != 2 {
		t.Errorf("an even share with nothing held elsewhere: %d; want 2", got)
	}
}
