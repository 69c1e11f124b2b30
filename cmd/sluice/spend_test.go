package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/sim"
)

// sluice serve counts the spend of its answers and of its bulk results in
// one ledger, at the configuration's prices: a negotiated rate for the
// realtime model, the batch price for the bulk result, both on /metrics.
func TestServeCountsSpendInOneLedger(t *testing.T) {
	s := sim.New(sim.Config{TTFT: time.Millisecond, BatchDuration: 100 * time.Millisecond, OutputTokensMin: 10, OutputTokensMax: 10})
	up := httptest.NewServer(s)
	defer func() { up.Close(); s.Close() }()
	cfg := config.Default()
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	cfg.BulkEnabled, cfg.DataDir, cfg.BulkMaxWait, cfg.BulkPoll = true, t.TempDir(), time.Second, 100*time.Millisecond
	// Output at $1,000,000 a million tokens: a dollar a token.
	var err error
	if cfg.Prices, err = price.New(map[string]price.Rates{"claude-haiku-4-5": {Output: 1_000_000}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hs, err := newHandler(ctx, cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hs.api)
	defer func() { srv.Close(); hs.proxy.Close(); hs.flushSpans() }()
	post := func(path, body string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("X-Api-Key", "sk-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	post("/v1/messages", `{"model":"claude-haiku-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`)
	post("/v1/bulk/messages", `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`)
	// spent is /metrics' sluice_spend_usd_total, by the series' labels.
	spent := func() map[string]float64 {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out := map[string]float64{}
		for _, line := range strings.Split(string(b), "\n") {
			if labels, ok := strings.CutPrefix(line, "sluice_spend_usd_total{"); ok {
				i := strings.LastIndex(labels, "} ")
				out[labels[:i]], _ = strconv.ParseFloat(labels[i+2:], 64)
			}
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		usd := spent()
		var haiku, bulk float64
		for labels, v := range usd {
			switch {
			case strings.Contains(labels, `kind="output",model="claude-haiku-4-5"`):
				haiku += v
			case strings.Contains(labels, `model="claude-sonnet-4-5",tenant="bulk"`):
				bulk += v
			}
		}
		if bulk > 0 {
			if haiku != 10 {
				t.Errorf("haiku's output cost $%v; want $10, ten tokens at the configured dollar each (%v)", haiku, usd)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no bulk spend on /metrics within 20 s: %v", usd)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
