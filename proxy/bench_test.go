package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	recording "github.com/sluicehq/sluice/record"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/spendstore"
)

// benchKey is the key the bench's requests carry, as every real request
// carries one.
const benchKey = "sk-bench"

// BenchmarkAddedLatency measures one request at a time, over keep-alive
// loopback connections, against the same httptest upstream: directly, and
// through sluice on each path. The difference between the p50s is what
// sluice adds. Run:
//
//	go test -run '^$' -bench AddedLatency -benchtime 5000x ./proxy/
func BenchmarkAddedLatency(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		writeMessage(w)
	}))
	defer up.Close()

	target := func(b *testing.B, windowed bool, edit func(*config.Config), opts ...Options) string {
		cfg := config.Default()
		cfg.Enabled = windowed
		cfg.UpstreamURL = mustURL(b, up.URL)
		if edit != nil {
			edit(&cfg)
		}
		opt := Options{Logger: benchLogger}
		for _, o := range opts {
			opt.ParkWhenQueued, opt.TracerProvider, opt.Recorder, opt.Books, opt.Inbound = o.ParkWhenQueued, o.TracerProvider, o.Recorder, o.Books, o.Inbound
		}
		return serveBench(b, cfg, opt)
	}
	// budgeted is a budget on the bench's key that it never reaches, and
	// the books (SPEND_STORE=memory): what checking a budget and counting
	// into the books cost each request.
	budgeted := func(c *config.Config) {
		sp := budget.Spec{Key: request.Tenant(http.Header{"X-Api-Key": {benchKey}}), Limit: 1e9, Period: budget.Day}
		if err := sp.Check(); err != nil {
			b.Fatal(err)
		}
		c.Budgets = []budget.Spec{sp}
	}
	books := func(b *testing.B) Options {
		s, err := spendstore.Open(false, "", nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return Options{Books: s}
	}
	// cred is the credential the requests carry: benchKey, unless a
	// case's url sets another (an identity-provider token).
	var cred string
	for _, tc := range []struct {
		name string
		url  func(b *testing.B) string
	}{
		{"direct", func(*testing.B) string { return up.URL }},
		{"plain", func(b *testing.B) string { return target(b, false, nil) }},
		{"windowed-size1", func(b *testing.B) string {
			return target(b, true, func(c *config.Config) { c.MaxSize = 1 })
		}},
		{"windowed-size1-cache-off", func(b *testing.B) string { // CACHE_AWARE=0: what the releaser costs a request without a prefix
			return target(b, true, func(c *config.Config) { c.MaxSize = 1; c.CacheAware = false })
		}},
		{"windowed-size1-parked", func(b *testing.B) string { // every request parked: what parking costs
			return target(b, true, func(c *config.Config) { c.MaxSize = 1 }, Options{ParkWhenQueued: -1})
		}},
		{"windowed-default", func(b *testing.B) string { return target(b, true, nil) }},
		// TRACING_ENABLED=1: what making and batching the spans costs,
		// without the export (the spans are dropped), which runs off the
		// request path.
		{"plain-traced", func(b *testing.B) string {
			return target(b, false, nil, Options{TracerProvider: discardingTracer(b)})
		}},
		{"windowed-size1-traced", func(b *testing.B) string {
			return target(b, true, func(c *config.Config) { c.MaxSize = 1 }, Options{TracerProvider: discardingTracer(b)})
		}},
		// RECORD_FILE set: what recording costs the request path (the walk
		// and the write run on the recorder's goroutine).
		{"plain-recorded", func(b *testing.B) string { return target(b, false, nil, Options{Recorder: benchRecorder(b)}) }},
		{"plain-budgeted", func(b *testing.B) string { return target(b, false, budgeted, books(b)) }},
		// [[backends]] of one key: what routing costs a request (the
		// choice, its lane in the gate, the key put on the call).
		{"plain-routed", func(b *testing.B) string { return target(b, false, oneBackend(b, up.URL)) }},
		{"windowed-size1-routed", func(b *testing.B) string {
			route := oneBackend(b, up.URL)
			return target(b, true, func(c *config.Config) { c.MaxSize = 1; route(c) })
		}},
		{"windowed-size1-budgeted", func(b *testing.B) string {
			return target(b, true, func(c *config.Config) { c.MaxSize = 1; budgeted(c) }, books(b))
		}},
		// INBOUND_KEYS_FILE holding benchKey's hash: what taking a sluice
		// key (and putting the held key on) costs.
		{"plain-inbound-key", func(b *testing.B) string { return target(b, false, nil, benchInboundKey(b)) }},
		// OIDC_ISSUER: a token of a real provider, checked once and then
		// remembered (oidcauth's own benchmarks give the first check).
		{"plain-inbound-token", func(b *testing.B) string {
			var o Options
			o, cred = benchInboundToken(b)
			return target(b, false, nil, o)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cred = benchKey
			url := tc.url(b) + "/v1/messages"
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			defer client.CloseIdleConnections()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for b.Loop() {
				start := time.Now()
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(requestJSON))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Api-Key", cred)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(start))
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("answered %s: the figure would be of a refusal", resp.Status)
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// benchInboundKey is inbound keys whose one key is benchKey.
func benchInboundKey(b *testing.B) Options {
	sum := sha256.Sum256([]byte(benchKey))
	path := b.TempDir() + "/keys.json"
	if err := os.WriteFile(path, []byte(`{"keys":[{"name":"bench","sha256":"`+hex.EncodeToString(sum[:])+`"}]}`), 0o600); err != nil {
		b.Fatal(err)
	}
	in, err := LoadInbound(InboundOptions{KeysFile: path, UpstreamKey: "sk-ant-held-bench"})
	if err != nil {
		b.Fatal(err)
	}
	return Options{Inbound: in}
}

// benchRecorder records to a file in b's temporary directory.
func benchRecorder(b *testing.B) *recording.Recorder {
	rc, err := recording.Open(recording.Config{Path: b.TempDir() + "/rec.jsonl", MaxBytes: 64 << 20, Logger: benchLogger})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rc.Close() })
	return rc
}

// discardingTracer is the SDK's tracer provider, batching as sluice's
// does, to an exporter that drops the spans.
func discardingTracer(b *testing.B) *sdktrace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}))
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

func mustURL(tb testing.TB, s string) *url.URL {
	tb.Helper()
	u, err := url.Parse(s)
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// benchLogger discards the access lines unless SLUICE_BENCH_LOG=stderr, so
// that the figure can be taken with and without their cost.
var benchLogger = func() *slog.Logger {
	if os.Getenv("SLUICE_BENCH_LOG") == "stderr" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}()

// oneBackend is a config edit that routes over one backend of one key on
// the upstream at base.
func oneBackend(b *testing.B, base string) func(*config.Config) {
	b.Setenv("SLUICE_BENCH_ROUTE_KEY", "sk-ant-bench-routed")
	return func(c *config.Config) {
		c.Backends = []config.Backend{{Name: "only", Kind: "anthropic", URL: mustURL(b, base), Keys: []string{"env:SLUICE_BENCH_ROUTE_KEY"}}}
	}
}
