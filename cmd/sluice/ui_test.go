package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/web"
)

func TestUISettingMountsThePage(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "upstream saw "+r.URL.Path)
	}))
	defer up.Close()
	for _, on := range []bool{true, false} {
		cfg := config.Default()
		cfg.UIEnabled = on
		cfg.UpstreamURL, _ = url.Parse(up.URL)
		ctx, cancel := context.WithCancel(context.Background())
		hs, err := newHandler(ctx, cfg, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer hs.flushSpans() // a no-op: tracing is off
		p, h := hs.proxy, hs.api
		srv := httptest.NewServer(h)
		get := func(path string) (int, string) {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		code, body := get("/ui/")
		if on && (code != 200 || !strings.Contains(body, "<canvas")) {
			t.Errorf("UI_ENABLED=1: GET /ui/ = %d %.80q; want the page", code, body)
		}
		if !on && (code != http.StatusTeapot || body != "upstream saw /ui/") {
			t.Errorf("UI_ENABLED=0: GET /ui/ = %d %q; want it relayed upstream like any path", code, body)
		}
		if code, _ := get("/ui/api/default"); on && code != 200 {
			t.Errorf("UI_ENABLED=1: GET /ui/api/default = %d", code)
		}
		if code, body := get("/"); code != 200 || strings.Contains(body, `"ui":"/ui/"`) != on || strings.Contains(body, "upstream saw") {
			t.Errorf("UI_ENABLED=%v: GET / = %d %q; want sluice's pointer, to /ui/ only when the page is on", on, code, body)
		}
		if code, body := get("/v1/models"); code != http.StatusTeapot || body != "upstream saw /v1/models" {
			t.Errorf("UI_ENABLED=%v: GET /v1/models = %d %q; want the proxy's relay", on, code, body)
		}
		srv.Close()
		p.Close()
		cancel()
	}
}

// The page's runs are wired: a POST /ui/api/run runs the burst through
// the bench (benchtrace.Run, which the web package cannot import itself)
// and answers its trace.
func TestPageRunsAreWired(t *testing.T) {
	cfg := config.Default()
	cfg.UIEnabled, cfg.UIBenchRuns = true, config.BenchRunsOn
	cfg.UpstreamURL, _ = url.Parse("http://127.0.0.1:1") // not called: the run has its own simulator
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hs, err := newHandler(ctx, cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.flushSpans()
	defer hs.proxy.Close()
	srv := httptest.NewServer(hs.api)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/ui/api/run", "application/json",
		strings.NewReader(`{"burst":2,"max_size":1,"max_wait_ms":0,"max_concurrency":1,"latency_ms":1,"capacity":0}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr web.Trace
	if err := json.NewDecoder(resp.Body).Decode(&tr); resp.StatusCode != 200 || err != nil || len(tr.Lanes) != 2 || len(tr.Lanes[1].Requests) != 2 {
		t.Fatalf("POST /ui/api/run: %d, %v, %d lanes; want 200 and the run's plain and windowed lanes of 2 requests", resp.StatusCode, err, len(tr.Lanes))
	}
}
