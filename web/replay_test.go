package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The trace that ships with the binary still parses as a Trace, holds the
// same burst on both lanes, and its windowed lane stays under its cap.
func TestDefaultTraceParses(t *testing.T) {
	b, err := os.ReadFile("static/trace-default.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var tr Trace
	if err := dec.Decode(&tr); err != nil {
		t.Fatalf("static/trace-default.json no longer parses (regenerate it with `go generate ./web`): %v", err)
	}
	if tr.Params != DefaultParams {
		t.Errorf("default trace was made with %+v; DefaultParams are %+v (run `go generate ./web`)", tr.Params, DefaultParams)
	}
	if !strings.HasPrefix(tr.Verdict, "windowed ") {
		t.Errorf("default trace's verdict line %q; want the suite's latency verdict, windowed against plain (run `go generate ./web`)", tr.Verdict)
	}
	if len(tr.Lanes) != 2 || tr.Lanes[0].Mode != "plain" || tr.Lanes[1].Mode != "windowed" {
		t.Fatalf("lanes %v; want plain then windowed", tr.Lanes)
	}
	for _, l := range tr.Lanes {
		if len(l.Requests) != DefaultParams.Burst {
			t.Errorf("%s lane: %d requests; want %d", l.Mode, len(l.Requests), DefaultParams.Burst)
		}
	}
	checkLanes(t, &tr)
}

// checkLanes asserts what the page shows: the plain lane's in-flight goes
// past the cap for a burst bigger than it, the windowed one never does, and
// every windowed request that got a slot has a wave flushed before it.
func checkLanes(t *testing.T, tr *Trace) {
	t.Helper()
	plain, win := peak(tr.Lanes[0]), peak(tr.Lanes[1])
	cap := tr.Params.MaxConcurrency
	if tr.Params.Burst > cap && plain <= cap {
		t.Errorf("plain lane peak in flight %d; want above the cap %d for a burst of %d", plain, cap, tr.Params.Burst)
	}
	if win > cap || win < 1 {
		t.Errorf("windowed lane peak in flight %d; want 1..%d", win, cap)
	}
	for _, r := range tr.Lanes[1].Requests {
		if r.Slot == nil {
			continue
		}
		if r.Wave == 0 || r.Flush == nil || *r.Flush > *r.Slot || r.Release == nil || *r.Release < *r.Slot {
			t.Errorf("windowed request %d: wave %d, flush %v, slot %v, release %v: want flush <= slot <= release", r.ID, r.Wave, r.Flush, *r.Slot, r.Release)
		}
	}
}

func peak(l Lane) int {
	type ev struct {
		t float64
		d int
	}
	var evs []ev
	for _, r := range l.Requests {
		if r.Slot != nil && r.Release != nil {
			evs = append(evs, ev{*r.Slot, 1}, ev{*r.Release, -1})
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].t < evs[j].t || evs[i].t == evs[j].t && evs[i].d < evs[j].d })
	n, p := 0, 0
	for _, e := range evs {
		n += e.d
		p = max(p, n)
	}
	return p
}

func postRun(t *testing.T, url string, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url+"/ui/api/run", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	return resp, buf.Bytes()
}

func TestRunEndpoint(t *testing.T) {
	h := New(Options{Run: testRun})
	srv := httptest.NewServer(h)
	defer srv.Close()

	t.Run("runs the scenario it is given", func(t *testing.T) {
		resp, b := postRun(t, srv.URL, `{"burst":20,"max_size":4,"max_wait_ms":10,"max_concurrency":3,"latency_ms":40,"capacity":0}`)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var tr Trace
		if err := json.Unmarshal(b, &tr); err != nil {
			t.Fatal(err)
		}
		checkLanes(t, &tr)
		if !strings.HasPrefix(tr.Verdict, "windowed ") {
			t.Errorf("the run's verdict line %q; want the suite's latency verdict, windowed against plain", tr.Verdict)
		}
		for _, w := range tr.Lanes[1].Waves {
			if w.Size > 4 {
				t.Errorf("wave %d has %d members; BATCH_MAX_SIZE was 4", w.ID, w.Size)
			}
		}
	})
	for _, c := range []struct{ name, body, want string }{
		{"burst too big", `{"burst":501}`, "burst=501"},
		{"latency too long", `{"latency_ms":6000}`, "latency_ms=6000"},
		{"too long a run", `{"burst":500,"max_concurrency":1,"latency_ms":5000}`, "over the page's limit"},
		{"unknown field", `{"bogus":1}`, "bogus"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, b := postRun(t, srv.URL, c.body)
			if resp.StatusCode != 400 || !strings.Contains(string(b), c.want) || !strings.Contains(string(b), `"invalid_request_error"`) {
				t.Errorf("got %d %s; want 400 invalid_request_error naming %q", resp.StatusCode, b, c.want)
			}
		})
	}
	t.Run("one at a time", func(t *testing.T) {
		first := make(chan int)
		go func() {
			resp, _ := postRun(t, srv.URL, `{"burst":8,"max_concurrency":2,"latency_ms":300,"capacity":0}`)
			first <- resp.StatusCode
		}()
		deadline := time.Now().Add(5 * time.Second)
		for len(h.runner.busy) == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		resp, b := postRun(t, srv.URL, `{"burst":2,"latency_ms":10}`)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), `"rate_limit_error"`) || resp.Header.Get("Retry-After") == "" {
			t.Errorf("a second run while one is going: got %d %s; want 429 rate_limit_error with retry-after", resp.StatusCode, b)
		}
		if code := <-first; code != 200 {
			t.Errorf("the first run answered %d", code)
		}
	})
}

func TestRunIsBoundedInTime(t *testing.T) {
	p := Params{Burst: 500, MaxSize: 16, MaxWaitMS: 20, MaxConcurrency: 20, LatencyMS: 5000}
	if err := p.Validate(); err == nil {
		t.Errorf("%+v estimated at %s was accepted; want refused over %s", p, p.estimate(), maxEstRun)
	}
}

// POST /ui/api/run starts a bench run on the server. It took a body with
// no Content-Type at all, which is what a cross-site fetch with mode
// no-cors and a Blob body sends, with no CORS preflight: any web page the
// operator opened could start runs on a loopback sluice, one after
// another. The page itself sends application/json, which a cross-site
// request can send only after a preflight that sluice does not grant.
func TestRunRefusesABodyWithoutJSONContentType(t *testing.T) {
	var ran atomic.Bool
	srv := httptest.NewServer(New(Options{Run: func(context.Context, Params) (*Trace, error) {
		ran.Store(true)
		return nil, errors.New("refused bodies are not run")
	}}))
	t.Cleanup(srv.Close)
	for _, ct := range []string{"", "text/plain;charset=UTF-8"} {
		req, _ := http.NewRequest("POST", srv.URL+"/ui/api/run", strings.NewReader(`{"burst":1,"latency_ms":1}`))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("POST /ui/api/run with Content-Type %q: %d %.120s; want 415", ct, resp.StatusCode, b)
		}
	}
	if ran.Load() {
		t.Error("a body without a JSON Content-Type started a run")
	}
}
