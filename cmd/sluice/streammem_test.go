package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemoryPerIdleStream is the memory benchmark of issue 30, item 3:
// what an open stream costs sluice while its upstream is silent, as an
// agent's stream is between bursts (thinking, a tool call). N streams
// (SLUICE_MEMBENCH_N, default 2,000) are opened through `sluice serve`,
// run as its own process so that the clients (this process) are not
// counted, on the plain path and the windowed one (SLUICE_MEMBENCH_MODE:
// plain or windowed, default windowed); the upstream here sends each its
// first events and then nothing but the connection. It reports sluice's
// RSS, heap, stacks and goroutines per open stream, and asserts no target:
// the figures go to docs/streams.md. SLUICE_MEMBENCH_BODY_KB=k gives
// each request a body of about k KB (an agent's is 50-200 KB: its
// conversation so far), to see what a stream's body costs while it is
// open; unset, the body is a one-line prompt. Skipped unless
// SLUICE_MEMBENCH=1.
func TestMemoryPerIdleStream(t *testing.T) {
	if os.Getenv("SLUICE_MEMBENCH") != "1" {
		t.Skip("a benchmark, not a test: set SLUICE_MEMBENCH=1 to run it")
	}
	n := envInt("SLUICE_MEMBENCH_N", 2000)
	mode := os.Getenv("SLUICE_MEMBENCH_MODE")
	if mode == "" {
		mode = "windowed"
	}
	t.Logf("RLIMIT_NOFILE %d", raiseFileLimit())

	release := make(chan struct{})
	var open atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n"+
			"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Thinking\"}}\n\n")
		w.(http.Flusher).Flush()
		open.Add(1)
		select { // silent from here, as a model is between bursts
		case <-release:
		case <-r.Context().Done():
		}
	}))
	up.Config.SetKeepAlivesEnabled(false)
	defer up.Close()
	defer close(release)

	env := []string{"UPSTREAM_URL=" + up.URL, "STREAM_IDLE_TIMEOUT_S=600", "BATCH_TIMEOUT_S=600"}
	switch mode {
	case "plain":
		env = append(env, "BATCH_ENABLED=0")
	case "windowed":
		env = append(env, "BATCH_ENABLED=1", "BATCH_MAX_CONCURRENCY="+strconv.Itoa(n), "BATCH_MAX_QUEUE="+strconv.Itoa(2*n))
	default:
		t.Fatalf("SLUICE_MEMBENCH_MODE=%q: want plain or windowed", mode)
	}
	// sluice serves its profiles on pprofAddr: the heap is read again
	// after a collection there (heap_inuse before it holds the ramp-up's
	// garbage too). SLUICE_MEMBENCH_PPROF=host:port picks the address,
	// and then the heap's profile is also written to heap.pprof in the
	// test's directory once the streams are open.
	pprofAddr, keepProfile := os.Getenv("SLUICE_MEMBENCH_PPROF"), true
	if pprofAddr == "" {
		pprofAddr, keepProfile = freeAddr(t), false
	}
	env = append(env, "PPROF_LISTEN_ADDR="+pprofAddr)
	sl := startSluiceProcess(t, env...)
	defer sl.stop()
	queued(t, sl.probe, sl.base) // the metrics handler's first use allocates; count it as idle
	time.Sleep(time.Second)
	idle := procStatus(t, sl.pid)
	idleM := scrape(t, sl.probe, sl.base)
	idleGC := scrapeCollected(t, sl, pprofAddr, "")

	tr := &http.Transport{MaxIdleConnsPerHost: n}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	body := memBenchBody(envInt("SLUICE_MEMBENCH_BODY_KB", 0))
	t.Logf("request body %d bytes", len(body))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var first atomic.Int32 // clients that have their first delta
	for i := range n {
		if i%500 == 499 {
			time.Sleep(50 * time.Millisecond) // under the listen backlog
		}
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, sl.base+"/v1/messages", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Api-Key", "sk-membench")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if strings.HasPrefix(line, "event: content_block_delta") {
					first.Add(1)
				}
			}
		})
	}
	for deadline := time.Now().Add(5 * time.Minute); int(first.Load()) < n; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d streams had their first event after 5 min (%d open upstream)", first.Load(), n, open.Load())
		}
	}
	time.Sleep(3 * time.Second) // let it settle
	loaded := procStatus(t, sl.pid)
	m := scrape(t, sl.probe, sl.base)
	profile := ""
	if keepProfile {
		profile = "heap.pprof"
	}
	collected := scrapeCollected(t, sl, pprofAddr, profile)
	per := func(a, b float64) float64 { return (a - b) / float64(n) }
	t.Logf("%s: %d streams open and silent upstream (%d upstream calls held); body budget held %.0f KB",
		mode, n, open.Load(), m["sluice_body_budget_held_bytes"]/1024)
	t.Logf("VmRSS idle %d KB, loaded %d KB: %.1f KB per open stream; threads %d",
		idle["VmRSS"]>>10, loaded["VmRSS"]>>10, per(float64(loaded["VmRSS"]), float64(idle["VmRSS"]))/1024, loaded["Threads"])
	t.Logf("per open stream: heap in use %.1f KB, stacks %.1f KB, goroutines %.2f",
		per(m["go_memstats_heap_inuse_bytes"], idleM["go_memstats_heap_inuse_bytes"])/1024,
		per(m["go_memstats_stack_inuse_bytes"], idleM["go_memstats_stack_inuse_bytes"])/1024,
		per(m["go_goroutines"], idleM["go_goroutines"]))
	t.Logf("per open stream after a collection: heap in use %.1f KB, heap live objects %.1f KB, stacks %.1f KB",
		per(collected["go_memstats_heap_inuse_bytes"], idleGC["go_memstats_heap_inuse_bytes"])/1024,
		per(collected["go_memstats_heap_alloc_bytes"], idleGC["go_memstats_heap_alloc_bytes"])/1024,
		per(collected["go_memstats_stack_inuse_bytes"], idleGC["go_memstats_stack_inuse_bytes"])/1024)
}

// scrapeCollected scrapes sluice's metrics after a garbage collection,
// which a heap profile with gc=1 from its pprof listener (at pprofAddr)
// runs first; the profile is written to the file profile unless "".
func scrapeCollected(t *testing.T, sl *sluiceProcess, pprofAddr, profile string) map[string]float64 {
	t.Helper()
	resp, err := sl.probe.Get("http://" + pprofAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		t.Fatal(err)
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(f, resp.Body)
		f.Close()
	}
	resp.Body.Close()
	return scrape(t, sl.probe, sl.base)
}

// memBenchBody is a streaming Messages body of about kb KB (a one-line
// prompt when kb is 0): the prompt is padded to the size.
func memBenchBody(kb int) string {
	const head, tail = `{"model":"claude-sonnet-4-5","max_tokens":4096,"stream":true,"messages":[{"role":"user","content":"`, `"}]}`
	prompt := "hello"
	if pad := kb<<10 - len(head) - len(tail); pad > len(prompt) {
		prompt = strings.Repeat("x", pad)
	}
	return head + prompt + tail
}
