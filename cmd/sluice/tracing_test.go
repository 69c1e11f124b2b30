package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
)

// With TRACING_ENABLED the demo builds its tracer provider from the OTEL_*
// variables and flushes it on exit: the spans of a burst reach the
// collector once the demo has stopped, well before the batch processor's
// own 5 s schedule would have sent them.
func TestDemoFlushesItsSpansOnExit(t *testing.T) {
	var mu sync.Mutex
	names := map[string]int{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("OTLP receiver: %v", err)
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names[s.Name]++
				}
			}
		}
		mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	defer rcv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "60000") // only the flush at exit sends them

	cfg := config.Default()
	cfg.Enabled, cfg.TracingEnabled, cfg.UIEnabled = true, true, false
	cfg.ListenAddr = "127.0.0.1:0"
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer time.AfterFunc(time.Minute, cancel).Stop()
	done := make(chan error)
	go func() {
		done <- demo(ctx, cfg, demoOptions{burst: 4, every: time.Hour, sim: sim.Config{TTFT: time.Millisecond, Seed: 1}}, pw)
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "burst 1:") {
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if err := <-done; err != nil {
		t.Fatalf("demo returned %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if names["POST /v1/messages"] != 4 || names["upstream POST"] != 4 || names["slot wait"] != 4 {
		t.Errorf("the collector got spans %v; want 4 requests, each with its slot wait and upstream call", names)
	}
}

// Tracing is off by default: sluice serve and demo build no tracer
// provider, so the proxy does no tracing work.
func TestTracingOffByDefault(t *testing.T) {
	cfg := config.Default()
	if cfg.TracingEnabled {
		t.Fatal("TRACING_ENABLED is on by default")
	}
	tp, flush, err := startTracing(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil || tp.TracerProvider != nil {
		t.Fatalf("startTracing with the defaults: provider %v, err %v; want none", tp.TracerProvider, err)
	}
	flush()
}
