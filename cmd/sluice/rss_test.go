package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// TestLargeBodiesBoundRSS is issue 23's 40 × 30 MB attack as a test: forty
// clients at once each send a 30 MB Messages body to `sluice serve` (its
// own process, so that only its memory is counted) with BODY_BUDGET_MB=256,
// whose upstream holds every call, so that every admitted body stays live.
// sluice's peak RSS (VmHWM) must stay within the bound the README states:
// the soft memory limit sluice sets (BODY_BUDGET_MB + 96 MB) plus 64 MB
// for the collector's lag behind a burst and what the limit does not count
// (the binary's code). Without the limit it reached 547–718 MB.
func TestLargeBodiesBoundRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 1.2 GB over loopback")
	}
	const (
		clients, size = 40, 30 << 20
		budgetMB      = 256
		rssHeadroomMB = 160
	)
	release := make(chan struct{})
	var upstreamCalls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		upstreamCalls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	env := []string{"BATCH_ENABLED=1", "BATCH_TIMEOUT_S=600", "BODY_BUDGET_MB=256", "UPSTREAM_URL=" + up.URL}
	if v := os.Getenv("SLUICE_RSS_GODEBUG"); v != "" {
		env = append(env, "GODEBUG="+v)
	}
	sl := startSluiceProcess(t, env...)
	defer sl.stop()

	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"` + strings.Repeat("x", size-100) + `"}]}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var shed, other atomic.Int32
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	start := time.Now()
	for range clients {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sl.base+"/v1/messages", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Api-Key", "sk-rss")
			resp, err := client.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					other.Add(1)
				}
				return
			}
			if resp.StatusCode == 529 {
				shed.Add(1)
			} else {
				other.Add(1)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	// Every client is either held (its body in sluice) or shed.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		q := queued(t, sl.probe, sl.base)
		if int(upstreamCalls.Load())+q+int(shed.Load())+int(other.Load()) >= clients {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: %d upstream, %d queued, %d shed, %d other of %d", upstreamCalls.Load(), q, shed.Load(), other.Load(), clients)
		}
	}
	st := procStatus(t, sl.pid)
	m := scrape(t, sl.probe, sl.base)
	t.Logf("%d clients × %d MB in %v: %d held upstream, %d queued, %d answered 529, %d otherwise", clients, size>>20,
		time.Since(start).Round(time.Millisecond), upstreamCalls.Load(), queued(t, sl.probe, sl.base), shed.Load(), other.Load())
	t.Logf("sluice: VmRSS %d MB, peak VmHWM %d MB; body budget held %.0f MB; heap in use %.0f MB",
		st["VmRSS"]>>20, st["VmHWM"]>>20, m["sluice_body_budget_held_bytes"]/(1<<20), m["go_memstats_heap_inuse_bytes"]/(1<<20))
	if os.Getenv("SLUICE_RSS_GODEBUG") != "" {
		if b, err := os.ReadFile(sl.stderr); err == nil {
			t.Logf("sluice's stderr:\n%s", b)
		}
	}
	if other.Load() > 0 {
		t.Errorf("%d clients were answered neither by the upstream nor 529", other.Load())
	}
	if bound := int64(budgetMB+rssHeadroomMB) << 20; st["VmHWM"] > bound {
		t.Errorf("sluice's peak RSS %d MB passed BODY_BUDGET_MB + %d MB = %d MB", st["VmHWM"]>>20, rssHeadroomMB, bound>>20)
	}
}

// sluice serve sets the soft memory limit from BODY_BUDGET_MB, unless the
// user set GOMEMLIMIT (which the runtime applied already).
func TestSetMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	quiet := slog.New(slog.DiscardHandler)
	cfg := config.Default()
	cfg.BodyBudget = 100 << 20
	debug.SetMemoryLimit(1 << 40)
	if got := setMemoryLimit(func(string) (string, bool) { return "1GiB", true }, cfg, quiet); got != 0 || debug.SetMemoryLimit(-1) != 1<<40 {
		t.Fatalf("with GOMEMLIMIT set: set %d, runtime's limit %d; want the user's left alone", got, debug.SetMemoryLimit(-1))
	}
	want := int64(100+64+32) << 20
	if got := setMemoryLimit(func(string) (string, bool) { return "", false }, cfg, quiet); got != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("without GOMEMLIMIT: set %d, runtime's limit %d; want %d (BODY_BUDGET_MB + 96 MB)", got, debug.SetMemoryLimit(-1), want)
	}
}
