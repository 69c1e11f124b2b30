package overhead

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a ')' of its own, utime 250, stime 50.
	stat := "4242 (we ird) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 1000 0 0\n"
	got, err := parseStatCPU([]byte(stat))
	if err != nil || got != 3.0 {
		t.Fatalf("parseStatCPU = %v, %v; want 3 s", got, err)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("a short line was read")
	}
	// This process's own line reads, and it has spent some CPU.
	if s := sampleCPU([]int{os.Getpid(), 0}); s[0] < 0 || s[1] != -1 {
		t.Errorf("sampleCPU(self, 0) = %v, want ≥ 0 and -1", s)
	}
}

// TestGenerate drives the instant upstream in process with the load
// generator: every answer read whole, each stream's events counted.
func TestGenerate(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(upstreamHandler))
	defer up.Close()
	for _, stream := range []bool{false, true} {
		res, err := generate(childSpec{URL: up.URL, Clients: 3, Warmup: 20 * time.Millisecond, Duration: 100 * time.Millisecond, Stream: stream, PIDs: []int{os.Getpid()}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests == 0 || res.Errors != 0 || res.P50 <= 0 || res.P99 < res.P50 || len(res.CPU) != 1 {
			t.Fatalf("stream %v: %+v", stream, res)
		}
		if stream && (res.Events != res.Requests*int64(len(streamEvents)) || res.TTFE50 <= 0 || res.TTFE50 > res.P99) {
			t.Errorf("stream: %d events for %d streams, TTFE p50 %v", res.Events, res.Requests, res.TTFE50)
		}
	}
	// A target that refuses is counted in errors, with the first one kept.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", 529) }))
	defer bad.Close()
	res, err := generate(childSpec{URL: bad.URL, Clients: 1, Duration: 30 * time.Millisecond})
	if err != nil || res.Requests != 0 || res.Errors == 0 || !strings.Contains(res.FirstErr, "529") {
		t.Errorf("refusing target: %+v, %v", res, err)
	}
}

// TestGoProxy drives the go-proxy in process, in front of the instant
// upstream: every Message and every stream relayed whole, event by event.
func TestGoProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(upstreamHandler))
	defer up.Close()
	u, err := url.Parse(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := newGoProxy(u, goProxyIdlePerHost(4))
	px := httptest.NewServer(rp)
	defer px.Close()
	defer rp.Transport.(*http.Transport).CloseIdleConnections()
	for _, stream := range []bool{false, true} {
		res, err := generate(childSpec{URL: px.URL, Clients: 3, Warmup: 20 * time.Millisecond, Duration: 100 * time.Millisecond, Stream: stream})
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests == 0 || res.Errors != 0 {
			t.Fatalf("stream %v: %+v", stream, res)
		}
		if stream && res.Events != res.Requests*int64(len(streamEvents)) {
			t.Errorf("stream: %d events for %d streams", res.Events, res.Requests)
		}
	}
	if goProxyIdlePerHost(4) != 100 || goProxyIdlePerHost(256) != 256 {
		t.Errorf("idle connections per host: %d, %d; want sluice's 100 and 256", goProxyIdlePerHost(4), goProxyIdlePerHost(256))
	}
}

// TestSummarize checks the arithmetic of the rows: added figures against
// direct in the same round, medians over rounds, CPU as totals.
func TestSummarize(t *testing.T) {
	r := &Report{Rounds: 3}
	for round := 1; round <= 3; round++ {
		f := float64(round)
		r.Runs = append(r.Runs,
			Measurement{round, Direct, phaseLatency, loadResult{Requests: 100, Seconds: 1, P50: f, P99: 2 * f}},
			Measurement{round, Plain, phaseLatency, loadResult{Requests: 100, Seconds: 1, P50: f + 0.1*f, P99: 2*f + 1, CPU: []float64{1}}},
			Measurement{round, Direct, phaseThroughput, loadResult{Requests: 1000, Seconds: 1}},
			Measurement{round, Plain, phaseThroughput, loadResult{Requests: 500 + 100*int64(round), Seconds: 1, CPU: []float64{0.5}}},
			Measurement{round, Direct, phaseStreams, loadResult{Requests: 10, Events: 100, Seconds: 1, TTFE50: 1, TTFE99: 2}},
			Measurement{round, Plain, phaseStreams, loadResult{Requests: 10, Events: 100, Seconds: 1, TTFE50: 1.5, TTFE99: 3, CPU: []float64{0.25}}},
		)
	}
	r.summarize()
	d, p := r.Row(Direct), r.Row(Plain)
	if d == nil || p == nil || r.Row(HAProxy) != nil {
		t.Fatalf("rows %+v", r.Rows)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if got < want-1e-9 || got > want+1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("direct vs direct", d.VsDirect, 1)
	near("plain added p50", p.AddedP50, 0.2) // 0.1, 0.2, 0.3
	near("plain added p99", p.AddedP99, 1)
	near("plain vs direct", p.VsDirect, 0.7) // 0.6, 0.7, 0.8
	near("plain CPU per 1,000", p.CPUPer1000, 1.5/2100*1000)
	near("plain events per CPU-second", p.EventsPerCPUSecond, 300/0.75)
	near("plain added TTFE p50", p.AddedTTFE50, 0.5)
	near("direct CPU", d.CPUPer1000, 0)
}

// TestGenerateLong drives the instant upstream in process with long,
// paced streams: each stream carries the pace's events, the upstream
// reads its pace from the request, and the proxy's memory and goroutines
// are sampled with streams open.
func TestGenerateLong(t *testing.T) {
	if p, ok := longPace([]byte(longBody(&Pace{Burst: 4, Bursts: 3, Pause: 1500 * time.Millisecond}))); !ok || *p != (Pace{Burst: 4, Bursts: 3, Pause: 1500 * time.Millisecond}) {
		t.Fatalf("the pace read back from its body: %+v, %v", p, ok)
	}
	if _, ok := longPace([]byte(`{"stream":true}`)); ok {
		t.Fatal("a pace read from a body without one")
	}
	up := httptest.NewServer(http.HandlerFunc(upstreamHandler))
	defer up.Close()
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "# TYPE go_goroutines gauge\ngo_goroutines 42\n")
	}))
	defer metrics.Close()
	pace := &Pace{Burst: 3, Bursts: 2, Pause: 50 * time.Millisecond}
	res, err := generate(childSpec{URL: up.URL, Clients: 4, Warmup: 20 * time.Millisecond, Duration: 300 * time.Millisecond, Stream: true,
		PIDs: []int{os.Getpid()}, Long: pace, Metrics: metrics.URL})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 || res.Events != res.Requests*int64(pace.events()) {
		t.Fatalf("%d streams, %d events (want %d each), %d errors (%s)", res.Requests, res.Events, pace.events(), res.Errors, res.FirstErr)
	}
	if res.P50 < 50 { // a stream lasts at least its pause
		t.Errorf("a paced stream took %v ms, less than its pause", res.P50)
	}
	if res.RSSIdleKB <= 0 || res.RSSLoadedKB <= 0 || res.GoroutinesIdle != 42 || res.GoroutinesLoaded != 42 || res.Open < 1 || res.Open > 4 {
		t.Errorf("samples: %+v", res)
	}
}
