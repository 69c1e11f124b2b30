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
// sluice's peak RSS (VmHWM) must stay within the bound docs/overload.md states (What bounds RSS):
// the soft memory limit sluice sets (BODY_BUDGET_MB + 96 MB) plus 96 MB
// for the collector's lag behind a burst and what the limit does not count
// (the binary's code). Without the limit it reached 547–718 MB.
func TestLargeBodiesBoundRSS(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 1.2 GB over loopback")
	}
	// 160 MB held on a quiet machine (370–380 MB peaks); CI runs it
	// beside other packages' tests on two cores, where the collector
	// lags further behind the readers: 419 and 433 MB were seen there
	// (docs/benchmarks.md). Without the soft limit it passes 540 MB.
	const budgetMB, rssHeadroomMB = 256, 192
	start := time.Now()
	r := sendLargeBodies(t, 0, "BODY_BUDGET_MB=256")
	t.Logf("%d clients × %d MB in %v: %d held upstream, %d queued, %d answered 429, %d otherwise", largeClients, largeSize>>20,
		time.Since(start).Round(time.Millisecond), r.upstream, r.queued, r.shed, r.other)
	t.Logf("sluice: VmRSS %d MB, peak VmHWM %d MB; body budget held %.0f MB; heap in use %.0f MB",
		r.loaded["VmRSS"]>>20, r.loaded["VmHWM"]>>20, r.metrics["sluice_body_budget_held_bytes"]/(1<<20), r.metrics["go_memstats_heap_inuse_bytes"]/(1<<20))
	if r.stderr != "" {
		t.Logf("sluice's stderr:\n%s", r.stderr)
	}
	if r.other > 0 {
		t.Errorf("%d clients were answered neither by the upstream nor 429: %q", r.other, r.otherWhy)
	}
	if bound := int64(budgetMB+rssHeadroomMB) << 20; r.loaded["VmHWM"] > bound {
		t.Errorf("sluice's peak RSS %d MB passed BODY_BUDGET_MB + %d MB = %d MB", r.loaded["VmHWM"]>>20, rssHeadroomMB, bound>>20)
	}
}

// The attack of issues 11 and 23: largeClients clients at once each send a
// largeSize Messages body.
const largeClients, largeSize = 40, 30 << 20

// largeBodies is what sendLargeBodies saw: sluice's memory (/proc status)
// before and after, its metrics after, and how the clients were answered.
type largeBodies struct {
	idle, loaded                  map[string]int64
	metrics                       map[string]float64
	upstream, queued, shed, other int
	otherWhy                      []string // what each of other was: its status or its error
	stderr                        string   // sluice's, when SLUICE_RSS_GODEBUG is set
}

// sendLargeBodies runs `sluice serve` (windowed, with env) in front of an
// upstream that holds every call, so that every admitted body stays live;
// sends it the attack; waits until every client is either held (its body
// in sluice) or answered, then settle longer; and reads sluice's memory.
func sendLargeBodies(t *testing.T, settle time.Duration, env ...string) largeBodies {
	t.Helper()
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
	env = append([]string{"BATCH_ENABLED=1", "BATCH_TIMEOUT_S=600", "UPSTREAM_URL=" + up.URL}, env...)
	godebug := os.Getenv("SLUICE_RSS_GODEBUG")
	if godebug != "" {
		env = append(env, "GODEBUG="+godebug)
	}
	sl := startSluiceProcess(t, env...)
	defer sl.stop()
	time.Sleep(time.Second)
	r := largeBodies{idle: procStatus(t, sl.pid)}

	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"` + strings.Repeat("x", largeSize-100) + `"}]}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var shed, other atomic.Int32
	var whyMu sync.Mutex
	var otherWhy []string
	otherWas := func(why string) {
		other.Add(1)
		whyMu.Lock()
		otherWhy = append(otherWhy, why)
		whyMu.Unlock()
	}
	tr := &http.Transport{MaxIdleConnsPerHost: largeClients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for range largeClients {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sl.base+"/v1/messages", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Api-Key", "sk-membench")
			resp, err := client.Do(req)
			switch {
			case err != nil:
				if ctx.Err() == nil {
					otherWas(err.Error())
				}
				return
			case resp.StatusCode == http.StatusTooManyRequests:
				shed.Add(1)
			default:
				otherWas(resp.Status)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		q := queued(t, sl.probe, sl.base)
		if int(upstreamCalls.Load())+q+int(shed.Load())+int(other.Load()) >= largeClients {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: %d upstream, %d queued, %d shed, %d other of %d", upstreamCalls.Load(), q, shed.Load(), other.Load(), largeClients)
		}
	}
	time.Sleep(settle)
	r.loaded, r.metrics = procStatus(t, sl.pid), scrape(t, sl.probe, sl.base)
	r.upstream, r.queued, r.shed, r.other = int(upstreamCalls.Load()), queued(t, sl.probe, sl.base), int(shed.Load()), int(other.Load())
	whyMu.Lock()
	r.otherWhy = append([]string(nil), otherWhy...)
	whyMu.Unlock()
	if godebug != "" {
		if b, err := os.ReadFile(sl.stderr); err == nil {
			r.stderr = string(b)
		}
	}
	return r
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
