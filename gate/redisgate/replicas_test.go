package redisgate

// Three `sluice serve` processes, built from cmd/sluice and exec'd, share
// one real redis-server in front of the simulator, which runs in this
// process behind a recorder that counts exactly what is in flight.

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sluicebin"
	"github.com/sluicehq/sluice/sim"
)

// recorder is the upstream: the simulator behind a count of the calls in
// flight, in all and by replica, and the order calls began in.
type recorder struct {
	sim  *sim.Server
	mu   sync.Mutex
	now  int
	peak int
	by   map[string]int // in flight by x-test-replica
	// window, when set, is the span of time whose per-replica peaks are
	// kept in windowPeak, and the fleet's in windowTotal.
	watching    bool
	windowPeak  map[string]int
	windowTotal int
	started     []int // x-test-seq, in the order calls reached the upstream
	slow        time.Duration
}

func newRecorder(t *testing.T) (*recorder, *httptest.Server) {
	cfg := sim.DefaultConfig()
	cfg.TTFT = 100 * time.Millisecond
	cfg.PerToken = 0
	cfg.Jitter = 0
	rec := &recorder{sim: sim.New(cfg), by: map[string]int{}, windowPeak: map[string]int{}, slow: 30 * time.Second}
	srv := httptest.NewServer(rec)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); rec.sim.Close() })
	return rec, srv
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the body first: only then does the server watch the connection,
	// and cancel r's context when a killed replica's socket closes.
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	replica := r.Header.Get("x-test-replica")
	seq, _ := strconv.Atoi(r.Header.Get("x-test-seq"))
	rec.mu.Lock()
	rec.now++
	rec.peak = max(rec.peak, rec.now)
	rec.by[replica]++
	if rec.watching {
		rec.windowPeak[replica] = max(rec.windowPeak[replica], rec.by[replica])
		rec.windowTotal = max(rec.windowTotal, rec.now)
	}
	rec.started = append(rec.started, seq)
	rec.mu.Unlock()
	defer func() {
		rec.mu.Lock()
		rec.now--
		rec.by[replica]--
		rec.mu.Unlock()
	}()
	if r.Header.Get("x-test-slow") != "" {
		select { // held until its replica is killed and the connection drops
		case <-r.Context().Done():
			return
		case <-time.After(rec.slow):
		}
	}
	rec.sim.ServeHTTP(w, r)
}

func (rec *recorder) inFlight(replica string) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if replica == "" {
		return rec.now
	}
	return rec.by[replica]
}

// send posts one Messages request to r, tagged with its replica and
// sequence number, and returns the status (0 when no answer came).
func send(r *sluicebin.Replica, seq int, slow bool) int {
	req, _ := http.NewRequest("POST", r.URL+"/v1/messages",
		strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi `+strconv.Itoa(seq)+`"}]}`))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("x-api-key", "sk-test")
	req.Header.Set("x-sim-output-tokens", "4")
	req.Header.Set("x-test-replica", r.Name)
	req.Header.Set("x-test-seq", strconv.Itoa(seq))
	if slow {
		req.Header.Set("x-test-slow", "1")
	}
	resp, err := sluicebin.Client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func fleet(t *testing.T, redisURL, upstream string, cap int) []*sluicebin.Replica {
	rs := make([]*sluicebin.Replica, 3)
	for i := range rs {
		rs[i] = sluicebin.StartReplica(t, "r"+strconv.Itoa(i), redisURL, upstream, cap)
	}
	return rs
}

// TestThreeReplicasOneCap: 300 requests spread over three replicas, cap
// 9: the upstream never has more than 9 in flight, and calls begin in the
// order the clients sent them, give or take one window (20 ms).
func TestThreeReplicasOneCap(t *testing.T) {
	const cap, n, gap = 9, 300, 2 * time.Millisecond
	srv := redistest.Start(t)
	rec, up := newRecorder(t)
	rs := fleet(t, srv.URL, up.URL, cap)
	sent := make([]time.Duration, n)
	status := make([]int, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * gap)))
		sent[i] = time.Since(start)
		wg.Go(func() { status[i] = send(rs[i%3], i, false) })
	}
	wg.Wait()
	for i, s := range status {
		if s != 200 {
			t.Errorf("request %d: status %d; want 200", i, s)
		}
	}
	if st := rec.sim.Stats(); st.PeakInflight > cap || rec.peak > cap {
		t.Errorf("peak in flight upstream = %d (simulator: %d); want at most the shared cap %d", rec.peak, st.PeakInflight, cap)
	}
	if rec.peak < cap {
		t.Errorf("peak in flight upstream = %d; the fleet never filled its cap of %d", rec.peak, cap)
	}
	// The order: no call may begin before one sent more than a window
	// earlier than it.
	var latest, worst time.Duration
	for _, seq := range rec.started {
		latest = max(latest, sent[seq])
		worst = max(worst, latest-sent[seq])
	}
	t.Logf("%d requests over 3 replicas: peak in flight %d of %d; worst inversion of arrival order %v", n, rec.peak, cap, worst)
	// One window is the target (docs/benchmarks.md gives the figure,
	// 19.9 ms on a quiet machine); the bound allows the scheduling of
	// three processes, Redis and the simulator on two cores under go
	// test -race ./..., where 40-45 ms was seen, and 104 and 150 ms once
	// cmd/sluice-image's two cold builds ran beside it, and 320 ms with
	// the whole suite and two other sessions' builds on the machine (load
	// average 8). A broken order inverts by a replica's queue (300
	// requests offered at 500/s to 90 calls/s: seconds), far past it.
	if worst > 500*time.Millisecond {
		t.Errorf("a call began %v after one sent later than it; want within one window (20 ms, plus scheduling on a loaded machine: at most 500 ms)", worst)
	}
}

// TestKilledReplicaSlotsReturn: a replica holding 6 of 9 slots is killed;
// within the 2 s lease TTL the other two use all 9, and none of their
// requests is lost.
func TestKilledReplicaSlotsReturn(t *testing.T) {
	const cap, ttl = 9, 2 * time.Second
	srv := redistest.Start(t)
	rec, up := newRecorder(t)
	rs := fleet(t, srv.URL, up.URL, cap)
	for i := range 6 {
		go send(rs[0], 1000+i, true)
	}
	for deadline := time.Now().Add(5 * time.Second); rec.inFlight("r0") < 6; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("r0 never held 6 slots")
		}
	}
	const n = 60
	status := make([]int, n)
	var wg sync.WaitGroup
	rec.mu.Lock()
	rec.watching, rec.windowTotal = true, rec.now
	rec.mu.Unlock()
	for i := range n {
		wg.Go(func() { status[i] = send(rs[1+i%2], i, false) })
	}
	// While r0 holds 6, r1 and r2 share the other 3: watch the fleet's
	// peak until their slots have been given back and taken again (9 of
	// their calls begun), then kill r0.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		rec.mu.Lock()
		begun := len(rec.started) - 6
		rec.mu.Unlock()
		if begun >= 9 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of r1's and r2's calls began in 10 s", begun)
		}
	}
	rec.mu.Lock()
	rec.watching = false
	peak := rec.windowTotal
	rec.mu.Unlock()
	if peak > cap {
		t.Fatalf("%d in flight while r0 held 6 of %d: r1 and r2 took more than the 3 left", peak, cap)
	}
	killed := time.Now()
	rs[0].Kill()
	var back time.Duration
	for deadline := killed.Add(2 * ttl); back == 0; time.Sleep(2 * time.Millisecond) {
		if rec.inFlight("r1")+rec.inFlight("r2") > cap-6 {
			back = time.Since(killed)
		}
		if time.Now().After(deadline) {
			t.Fatalf("r0's slots did not come back within %v of its kill", 2*ttl)
		}
	}
	wg.Wait()
	for i, s := range status {
		if s != 200 {
			t.Errorf("request %d on %s: status %d; want 200", i, rs[1+i%2].Name, s)
		}
	}
	t.Logf("r0's slots came back %v after SIGKILL (GATE_LEASE_TTL_S=2); peak in flight %d of %d", back, rec.peak, cap)
	if back > ttl+200*time.Millisecond {
		t.Errorf("r0's slots came back %v after its kill; want within the lease TTL, %v", back, ttl)
	}
	if rec.peak > cap {
		t.Errorf("peak in flight %d; want at most %d", rec.peak, cap)
	}
}

// TestRedisStopsUnderLoad: Redis is killed in the middle of a load and
// started again (empty) 1.5 s later. Every request is answered; while it
// is gone the fleet keeps to the cap of 9, each replica to what it held at
// its last reply plus its share of the slots free then (here, with a
// line, none); once it is back the shared gate is in force again (one
// replica alone may use all 9).
func TestRedisStopsUnderLoad(t *testing.T) {
	const cap, n, gap = 9, 300, 10 * time.Millisecond
	srv := redistest.Start(t)
	rec, up := newRecorder(t)
	rs := fleet(t, srv.URL, up.URL, cap)
	status := make([]int, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * gap)))
		switch i {
		case 70: // 0.7 s in
			srv.Stop()
		case 100: // 0.3 s later: every replica has noticed, and what it held before has ended
			rec.mu.Lock()
			rec.watching, rec.windowTotal = true, rec.now
			rec.mu.Unlock()
		case 200:
			rec.mu.Lock()
			rec.watching = false
			rec.mu.Unlock()
			for _, r := range rs {
				if r.Metric(t, "sluice_gate_fallback") != 1 {
					t.Errorf("%s: sluice_gate_fallback is not 1 with Redis down", r.Name)
				}
			}
			srv.Restart()
		}
		wg.Go(func() { status[i] = send(rs[i%3], i, false) })
	}
	wg.Wait()
	for i, s := range status {
		if s != 200 {
			t.Errorf("request %d: status %d; want 200", i, s)
		}
	}
	if rec.windowTotal > cap {
		t.Errorf("the fleet had %d in flight with Redis down; want at most the cap, %d", rec.windowTotal, cap)
	}
	t.Logf("with Redis down, peak in flight %d of %d, by replica %v", rec.windowTotal, cap, rec.windowPeak)
	for _, r := range rs {
		for deadline := time.Now().Add(5 * time.Second); r.Metric(t, "sluice_gate_fallback") != 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still on its fallback 5 s after Redis came back", r.Name)
			}
		}
	}
	// Shared again: one replica alone fills the whole cap.
	rec.mu.Lock()
	rec.peak = 0
	rec.mu.Unlock()
	for i := range 40 {
		wg.Go(func() {
			if s := send(rs[0], 1000+i, false); s != 200 {
				t.Errorf("after Redis came back: status %d; want 200", s)
			}
		})
	}
	wg.Wait()
	if rec.peak != cap {
		t.Errorf("40 requests on one replica once Redis was back: peak in flight %d; want the shared cap, %d", rec.peak, cap)
	}
}

// TestRedisStallUnderLoad is issue 23's repro of a stall: replica r0
// holds all 4 slots of a cap of 4 with calls of 5 s and r1 has 2 requests
// waiting when Redis hangs (SIGSTOP) for 4 s, longer than the 2 s lease;
// during the stall 10 requests arrive, alternating between the replicas.
// While it hangs the fleet keeps to the cap (r1 may not start its waiters
// while r0's calls may still run: ⌈4 ÷ 2⌉ = 2 each made 6 in flight), and
// once it answers the calls begin in their order of arrival across the
// replicas, not one replica's whole line first.
func TestRedisStallUnderLoad(t *testing.T) {
	const cap = 4
	srv := redistest.Start(t)
	rec, up := newRecorder(t)
	rec.slow = 5 * time.Second
	rs := []*sluicebin.Replica{
		sluicebin.StartReplica(t, "r0", srv.URL, up.URL, cap),
		sluicebin.StartReplica(t, "r1", srv.URL, up.URL, cap),
	}
	var wg sync.WaitGroup
	status := map[int]int{}
	var mu sync.Mutex
	sendAs := func(r *sluicebin.Replica, seq int, slow bool) {
		wg.Go(func() {
			s := send(r, seq, slow)
			mu.Lock()
			status[seq] = s
			mu.Unlock()
		})
	}
	for i := range cap {
		sendAs(rs[0], 1000+i, true)
	}
	for deadline := time.Now().Add(5 * time.Second); rec.inFlight("r0") < cap; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("r0 never held the 4 slots")
		}
	}
	sendAs(rs[1], 2000, false)
	sendAs(rs[1], 2001, false)
	for deadline := time.Now().Add(5 * time.Second); redisInt(t, srv, "ZCARD", "{sluice:gate}:w") < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("r1's two requests never joined the shared line")
		}
	}
	rec.mu.Lock()
	rec.watching, rec.windowTotal = true, rec.now
	rec.mu.Unlock()
	srv.Pause()
	stalled := time.Now()
	var sent [10]time.Duration
	for i := range 10 {
		sent[i] = time.Since(stalled)
		sendAs(rs[i%2], i, false)
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Until(stalled.Add(4 * time.Second)))
	rec.mu.Lock()
	rec.watching = false
	peak := rec.windowTotal
	rec.mu.Unlock()
	srv.Resume()
	wg.Wait()
	for seq, s := range status {
		if s != 200 {
			t.Errorf("request %d: status %d; want 200", seq, s)
		}
	}
	var order []int
	for _, seq := range rec.started {
		if seq < 1000 {
			order = append(order, seq)
		}
	}
	t.Logf("a 4 s stall: peak in flight %d of a cap of %d; the stall's 10 requests (even numbers on r0, odd on r1, sent in numeric order) began in the order %v", peak, cap, order)
	if peak > cap {
		t.Errorf("%d in flight during the stall; want at most the cap, %d", peak, cap)
	}
	// Two slots freed at once go to the next two in line, on both
	// replicas, and the call granted by a message may begin a moment
	// after the one granted in a reply: allow the inversion of
	// neighbours (100 ms apart), as TestThreeReplicasOneCap allows a
	// loaded machine's scheduling. One replica's whole line first inverts
	// by 0.8 s or more. Seen under a loaded machine (the whole suite and
	// other builds beside it): 403 ms, one request granted four places
	// late; the bound is 500 ms, short of a whole line's 0.8 s.
	var latest, worst time.Duration
	for _, seq := range order {
		latest = max(latest, sent[seq])
		worst = max(worst, latest-sent[seq])
	}
	if worst > 500*time.Millisecond {
		t.Errorf("after the stall the calls began in the order %v, one %v after one sent later than it; want their order of arrival (within 500 ms)", order, worst)
	}
}
