package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/upstream"
)

// silentListener is a backend that accepts connections and never answers
// on them: no byte back, no close, until the test ends.
type silentListener struct {
	URL   string
	conns atomic.Int32
}

func startSilent(t *testing.T) *silentListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentListener{URL: "http://" + ln.Addr().String()}
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return s
}

// silentPoolConfig declares backend a (the simulator, key A) and backend
// b (a silent listener, key B).
func silentPoolConfig(t *testing.T, a, b string, windowed bool, edit func(*config.Config)) config.Config {
	t.Helper()
	t.Setenv("SLUICE_TEST_ROUTE_A", routeKeyA)
	t.Setenv("SLUICE_TEST_ROUTE_B", routeKeyB)
	ua, _ := url.Parse(a)
	ub, _ := url.Parse(b)
	return testConfig(t, a, windowed, func(c *config.Config) {
		c.Backends = []config.Backend{
			{Name: "a", Kind: "anthropic", URL: ua, Keys: []string{"env:SLUICE_TEST_ROUTE_A"}, MaxConcurrency: 64},
			{Name: "b", Kind: "anthropic", URL: ub, Keys: []string{"env:SLUICE_TEST_ROUTE_B"}, MaxConcurrency: 64},
		}
		c.MaxConcurrency = 128
		if edit != nil {
			edit(c)
		}
	})
}

// TestSilentBackendFoundOut is issue 37's third finding over real
// loopback sockets: of two backends, the second accepts connections and
// never answers. Two waves of 40 requests each, on both paths: every
// request is answered 200 by the first backend within its deadline (the
// silent key's calls are cut once they outlast the bound its peers'
// times to first byte teach, and fail over), and the silent key is
// counted failing. Before, on the windowed path 13 of 40 got 504 after
// the whole deadline in both waves with no failure counted; on the plain
// path they waited out UPSTREAM_TIMEOUT_S (600 s).
func TestSilentBackendFoundOut(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		s := sim.New(sim.Config{TTFT: 5 * time.Millisecond})
		t.Cleanup(s.Close)
		api := httptest.NewServer(s)
		t.Cleanup(api.Close)
		silent := startSilent(t)
		cfg := silentPoolConfig(t, api.URL, silent.URL, windowed, func(c *config.Config) {
			c.Timeout = 10 * time.Second // BATCH_TIMEOUT_S
		})
		p, px := startProxy(t, cfg)
		// The floor scaled down from its 10 s, so that the test takes
		// seconds; the bound is still learnt from the first backend's
		// times (a few milliseconds, times four: under the floor).
		p.routes.FirstByteFloor = 300 * time.Millisecond

		client := &http.Client{Timeout: 30 * time.Second}
		for wave := 1; wave <= 2; wave++ {
			statuses := make([]int, 40)
			bodies := make([]string, 40)
			var wg sync.WaitGroup
			for i := range statuses {
				wg.Go(func() {
					req, _ := http.NewRequest(http.MethodPost, px.URL+"/v1/messages", strings.NewReader(requestJSON))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Anthropic-Version", "2023-06-01")
					req.Header.Set("X-Sim-Output-Tokens", "4")
					resp, err := client.Do(req)
					if err != nil {
						bodies[i] = err.Error()
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					statuses[i], bodies[i] = resp.StatusCode, string(b)
				})
			}
			wg.Wait()
			bad := 0
			for i, st := range statuses {
				if st != http.StatusOK {
					bad++
					if bad <= 3 {
						t.Errorf("wave %d, request %d: status %d, %s; want 200 from backend a", wave, i, st, bodies[i])
					}
				}
			}
			if bad > 0 {
				t.Errorf("wave %d: %d of 40 not answered 200", wave, bad)
			}
		}
		var failures, routedB uint64
		for _, r := range p.Backends() {
			if r.Key == "b/1" {
				failures, routedB = r.Failures, r.Routed
			}
		}
		if failures == 0 {
			t.Errorf("the silent key b/1 counts no failure after %d requests routed to it; want it counted failing", routedB)
		}
		if silent.conns.Load() == 0 {
			t.Errorf("the silent backend was never called: the test tests nothing")
		}
	})
}

// TestAnswerNotSentTwice is issue 37's fourth finding over real loopback
// sockets: a 200 whose connection drops mid-body (the simulator's
// reset-once) had begun, so the upstream generated (and billed) it. It is
// not sent again on either path; the client gets the same 502 api_error
// that says so. Before, the windowed path sent it again (two upstream
// calls, the client got 200).
func TestAnswerNotSentTwice(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		s := sim.New(sim.Config{})
		t.Cleanup(s.Close)
		var calls atomic.Int32
		api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			s.ServeHTTP(w, r)
		}))
		t.Cleanup(api.Close)
		_, px := startProxy(t, testConfig(t, api.URL, windowed))
		req, _ := http.NewRequest(http.MethodPost, px.URL+"/v1/messages", strings.NewReader(requestJSON))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", "sk-test")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("X-Sim-Fault", "reset-once")
		req.Header.Set("X-Sim-Fault-Key", fmt.Sprint("twice-", windowed))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		resp.Body.Close()
		if n := calls.Load(); n != 1 {
			t.Errorf("%d upstream calls; want 1: the answer had begun", n)
		}
		var e apierror.Body
		if resp.StatusCode != http.StatusBadGateway || json.Unmarshal([]byte(body), &e) != nil || e.Error.Type != "api_error" {
			t.Fatalf("status %d, %s; want a 502 api_error", resp.StatusCode, body)
		}
		if !strings.Contains(e.Error.Message, "not sent again") {
			t.Errorf("message %q does not say the request was not sent again", e.Error.Message)
		}
	})
}

// TestHeaderWatch: the wait for an attempt's headers, in virtual time.
// With nothing learnt the watch looks again each floor until the pool's
// answers teach a bound, then cuts at it; a learnt bound cuts at once at
// itself; UPSTREAM_TIMEOUT_S caps it, and alone bounds a call without
// backends; headers in time end the watch for good.
func TestHeaderWatch(t *testing.T) {
	t.Setenv("SLUICE_TEST_WATCH_KEY", routeKeyA)
	const upstreamTimeout = 600 * time.Second
	pool := func(t *testing.T) *route.Pool {
		u, _ := url.Parse("http://upstream.test")
		p, err := route.New([]route.Spec{{Name: "a", Kind: "anthropic", Client: upstream.New(u, upstream.Options{}),
			Keys: []string{"env:SLUICE_TEST_WATCH_KEY"}, Cap: 4}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	learn := func(p *route.Pool, took time.Duration) {
		for range 20 {
			p.FirstByte(p.Keys[0], true, 100, took)
			p.FirstByte(p.Keys[0], false, 1000, took)
		}
	}
	// cutAt arms a watch over a call sent now and reports when, and with
	// what cause, it was cut; headersAt > 0: the headers come then.
	cutAt := func(t *testing.T, l headerLimits, headersAt time.Duration, during func()) (time.Duration, error) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		start := time.Now()
		w := watchHeaders(nil, l, start, cancel)
		if during != nil {
			during()
		}
		if headersAt > 0 {
			time.Sleep(headersAt - time.Since(start))
			if cut, _ := w.stop(); cut {
				t.Errorf("cut before its headers came at %v", headersAt)
			}
			time.Sleep(2 * upstreamTimeout)
			return 0, context.Cause(ctx)
		}
		<-ctx.Done()
		took := time.Since(start)
		if cut, _ := w.stop(); !cut {
			t.Error("stop after the cut says it was not cut")
		}
		return took, context.Cause(ctx)
	}
	for _, tc := range []struct {
		name      string
		learnt    time.Duration // the key's answers' time to first byte; 0: none
		keyless   bool
		during    func(p *route.Pool) // at 15 s into the call
		headersAt time.Duration
		wantAt    time.Duration
		wantCause error
		whole     bool // a whole answer, not a stream
	}{
		{name: "learnt: cut at the floor", learnt: 100 * time.Millisecond,
			wantAt: route.DefaultFirstByteFloor, wantCause: errHeadersLate},
		{name: "learnt: four times the p99 above the floor", learnt: 5 * time.Second,
			wantAt: 20 * time.Second, wantCause: errHeadersLate},
		{name: "learnt while waiting: cut at the next look", during: func(p *route.Pool) { learn(p, 100*time.Millisecond) },
			wantAt: 2 * route.DefaultFirstByteFloor, wantCause: errHeadersLate},
		{name: "learnt past UPSTREAM_TIMEOUT_S: cut at it", learnt: 200 * time.Second,
			wantAt: upstreamTimeout, wantCause: errUpstreamTimeout},
		{name: "nothing learnt: UPSTREAM_TIMEOUT_S",
			wantAt: upstreamTimeout, wantCause: errUpstreamTimeout},
		{name: "no backends: UPSTREAM_TIMEOUT_S", keyless: true,
			wantAt: upstreamTimeout, wantCause: errUpstreamTimeout},
		{name: "headers in time: never cut", learnt: 100 * time.Millisecond, headersAt: 9 * time.Second},
		{name: "a whole answer on a silent key: cut at the learnt bound", learnt: 5 * time.Second, whole: true,
			wantAt: 20 * time.Second, wantCause: errHeadersLate},
		{name: "a whole answer on a key answering others: given its size at 10 tokens/s", learnt: 5 * time.Second, whole: true,
			during: func(p *route.Pool) { p.FirstByte(p.Keys[0], false, 1000, time.Second) },
			wantAt: route.WholeAnswerBound(1000), wantCause: errHeadersLate},
		{name: "a long whole answer on a live key: never cut before its headers", learnt: 5 * time.Second, whole: true,
			during: func(p *route.Pool) { p.FirstByte(p.Keys[0], false, 1000, time.Second) }, headersAt: 50 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := pool(t)
				if tc.learnt > 0 {
					learn(p, tc.learnt)
				}
				l := headerLimits{upstreamTimeout: upstreamTimeout, stream: true, size: 100}
				if tc.whole {
					l.stream, l.size = false, 1000
				}
				if !tc.keyless {
					l.pool, l.key = p, p.Keys[0]
				}
				var during func()
				if tc.during != nil {
					during = func() {
						go func() {
							time.Sleep(15 * time.Second)
							tc.during(p)
						}()
					}
				}
				at, cause := cutAt(t, l, tc.headersAt, during)
				if at != tc.wantAt || cause != tc.wantCause {
					t.Errorf("cut after %v with %v; want after %v with %v", at, cause, tc.wantAt, tc.wantCause)
				}
			})
		})
	}
}
