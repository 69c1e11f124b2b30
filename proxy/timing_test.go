package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/config"
)

func (rig *bubbleRig) post(t *testing.T, ctx context.Context, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rig.url+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-test")
	return rig.client.Do(req)
}

// logs sends rig's log, its access lines among it, to the builder it
// returns (read it once the bubble is idle).
func (rig *bubbleRig) logs() *strings.Builder {
	var b strings.Builder
	rig.proxy.log = slog.New(slog.NewTextHandler(&syncWriter{w: &b}, nil))
	return &b
}

// answered posts body through rig, reads the answer to its end and waits
// until the bubble is idle (the access line written): the answer's status
// and body.
func (rig *bubbleRig) answered(t *testing.T, body string) (int, string) {
	t.Helper()
	resp, err := rig.post(t, context.Background(), body)
	if err != nil {
		t.Fatal(err)
	}
	text := readAll(t, resp.Body)
	resp.Body.Close()
	synctest.Wait()
	return resp.StatusCode, text
}

func decodeError(t *testing.T, r io.Reader) apierror.Body {
	t.Helper()
	var e apierror.Body
	if err := json.NewDecoder(r).Decode(&e); err != nil {
		t.Fatalf("decode error body: %v", err)
	}
	return e
}

func TestDeadlineAnswers504AndCancelsUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cancelled := make(chan struct{})
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body) // the server sees a hang-up only after the body
			<-r.Context().Done()        // a hung upstream
			close(cancelled)
		}, func(c *config.Config) { c.Timeout = 5 * time.Second; c.MaxWait = 20 * time.Millisecond })
		start := time.Now()
		resp, err := rig.post(t, context.Background(), requestJSON)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if elapsed := time.Since(start); elapsed != 5*time.Second+20*time.Millisecond {
			t.Errorf("answered after %v; want the window's 20ms plus BATCH_TIMEOUT_S 5s", elapsed)
		}
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("status = %d; want 504", resp.StatusCode)
		}
		if e := decodeError(t, resp.Body); e.Type != "error" || e.Error.Type != "timeout_error" || !strings.Contains(e.Error.Message, "BATCH_TIMEOUT_S") || e.RequestID == "" {
			t.Fatalf("error body = %+v", e)
		}
		if resp.Header.Get("Request-Id") == "" {
			t.Error("no request-id header on sluice's own error")
		}
		synctest.Wait()
		select {
		case <-cancelled:
		default:
			t.Fatal("the upstream call was not cancelled at the deadline")
		}
	})
}

// With idle release (the default), a lone windowed request with every slot
// free waits for no window: it is answered at its deadline, BATCH_TIMEOUT_S
// after it arrived, and its wave closed as idle.
func TestIdleReleaseSkipsTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done() // a hung upstream
		}, func(c *config.Config) {
			c.Timeout = 5 * time.Second
			c.MaxWait = 20 * time.Millisecond
			c.IdleRelease = true
		})
		start := time.Now()
		resp, err := rig.post(t, context.Background(), requestJSON)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if elapsed := time.Since(start); elapsed != 5*time.Second {
			t.Errorf("answered after %v; want BATCH_TIMEOUT_S 5s, with no window wait", elapsed)
		}
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("status = %d; want 504", resp.StatusCode)
		}
	})
}

func TestDeadlineCoversSlotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}, func(c *config.Config) { c.Timeout = 3 * time.Second; c.MaxConcurrency = 1 })
		var wg sync.WaitGroup
		statuses := make([]int, 3)
		for i := range statuses {
			wg.Go(func() {
				resp, err := rig.post(t, context.Background(), requestJSON)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				statuses[i] = resp.StatusCode
			})
		}
		wg.Wait()
		// The one sent upstream timed out there: 504. The two that never
		// left their line were held back by sluice: 429, which Claude
		// Code retries on its own model (a 504 it answers by switching
		// to its fallback model).
		slices.Sort(statuses)
		if want := []int{http.StatusTooManyRequests, http.StatusTooManyRequests, http.StatusGatewayTimeout}; !slices.Equal(statuses, want) {
			t.Errorf("statuses %v; want %v", statuses, want)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("upstream saw %d calls; want 1 (the others timed out waiting for the one slot)", n)
		}
		if st := rig.proxy.GateStats(); st.InFlight != 0 || st.Waiting != 0 {
			t.Errorf("gate after all answered = %+v; want empty", st)
		}
	})
}

func TestClientDepartingBeforeSlotNeverReachesUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var seen sync.Map
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			seen.Store(string(body), true)
			<-release
			writeMessage(w)
		}, func(c *config.Config) { c.MaxConcurrency = 1 })

		first := make(chan int)
		go func() {
			resp, err := rig.post(t, context.Background(), requestJSON)
			if err != nil {
				t.Error(err)
				first <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			first <- resp.StatusCode
		}()
		synctest.Wait() // the first holds the only slot

		const leaver = `{"model":"m","max_tokens":1,"messages":[],"leaver":true}`
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			_, err := rig.post(t, ctx, leaver)
			done <- err
		}()
		time.Sleep(time.Second) // virtual: the leaver waits for the slot
		synctest.Wait()
		if q := rig.proxy.sched.Queued(); q != 1 {
			t.Fatalf("queued = %d; want the leaver waiting", q)
		}
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the leaver's request did not fail after cancel")
		}
		synctest.Wait()
		close(release)
		if s := <-first; s != 200 {
			t.Fatalf("first status = %d", s)
		}
		synctest.Wait()
		if _, ok := seen.Load(leaver); ok {
			t.Fatal("a client that left before its slot reached the upstream")
		}
		if st := rig.proxy.GateStats(); st.InFlight != 0 || st.Waiting != 0 {
			t.Fatalf("gate = %+v; want empty", st)
		}
	})
}

func TestClientDepartingInFlightCancelsUpstream(t *testing.T) {
	bothModesBubble(t, func(t *testing.T, windowed bool) {
		cancelled := make(chan struct{})
		rig := newBubbleRig(t, windowed, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
			close(cancelled)
		})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(2 * time.Second)
			cancel()
		}()
		if _, err := rig.post(t, ctx, requestJSON); err == nil {
			t.Fatal("want an error after cancel")
		}
		<-cancelled
		synctest.Wait()
		if st := rig.proxy.GateStats(); st.InFlight != 0 {
			t.Fatalf("gate = %+v; want the slot back", st)
		}
	})
}

func TestStreamIdleTimeoutEndsWithInBandError(t *testing.T) {
	bothModesBubble(t, func(t *testing.T, windowed bool) {
		rig := newBubbleRig(t, windowed, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, sseEvents[0]+sseEvents[1])
			w.(http.Flusher).Flush()
			<-r.Context().Done() // stalls
		}, func(c *config.Config) { c.StreamIdleTimeout = 7 * time.Second })
		resp, err := rig.post(t, context.Background(), streamRequestJSON)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		if ev := readEvent(t, br); ev != sseEvents[0] {
			t.Fatalf("first event = %q", ev)
		}
		readEvent(t, br)
		stalledAt := time.Now()
		ev := readEvent(t, br)
		if waited := time.Since(stalledAt); waited != 7*time.Second {
			t.Errorf("error event after %v of silence; want STREAM_IDLE_TIMEOUT_S 7s", waited)
		}
		if !strings.HasPrefix(ev, "event: error\ndata: ") || !strings.Contains(ev, `"type":"timeout_error"`) {
			t.Fatalf("last event = %q; want an in-band timeout_error", ev)
		}
		if rest := readAll(t, br); rest != "" {
			t.Fatalf("bytes after the error event: %q", rest)
		}
		synctest.Wait()
		if st := rig.proxy.GateStats(); st.InFlight != 0 {
			t.Fatalf("gate = %+v; want the slot released", st)
		}
	})
}

func TestStreamMayOutliveWaveDeadlineAndHoldsSlotUntilEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range sseEvents {
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
				time.Sleep(2 * time.Second) // 16 s in all, past the 5 s deadline
			}
		}, func(c *config.Config) { c.Timeout = 5 * time.Second; c.MaxConcurrency = 1 })
		resp, err := rig.post(t, context.Background(), streamRequestJSON)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		for i := range sseEvents {
			if ev := readEvent(t, br); ev != sseEvents[i] {
				t.Fatalf("event %d = %q", i, ev)
			}
			if i == 3 {
				if st := rig.proxy.GateStats(); st.InFlight != 1 {
					t.Fatalf("mid-stream gate = %+v; want the slot held", st)
				}
			}
		}
		io.Copy(io.Discard, br)
		synctest.Wait()
		if st := rig.proxy.GateStats(); st.InFlight != 0 {
			t.Fatalf("gate after the stream = %+v; want the slot released", st)
		}
	})
}

func TestMembersAnswerIndependently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), "slow") {
				time.Sleep(10 * time.Second)
			}
			writeMessage(w)
		}, func(c *config.Config) { c.MaxSize = 2; c.MaxWait = time.Second })
		start := time.Now()
		var wg sync.WaitGroup
		took := map[string]time.Duration{}
		var mu sync.Mutex
		for _, kind := range []string{"slow", "fast"} {
			wg.Go(func() {
				resp, err := rig.post(t, context.Background(), `{"model":"m","max_tokens":1,"messages":[],"kind":"`+kind+`"}`)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				took[kind] = time.Since(start)
				mu.Unlock()
			})
		}
		wg.Wait()
		if took["fast"] != 0 || took["slow"] != 10*time.Second {
			t.Fatalf("fast took %v, slow %v; want 0 (a full wave flushes at once) and 10s", took["fast"], took["slow"])
		}
	})
}

// bothModesBubble runs f in a synctest bubble on each path.
func bothModesBubble(t *testing.T, f func(t *testing.T, windowed bool)) {
	bothModes(t, func(t *testing.T, windowed bool) {
		synctest.Test(t, func(t *testing.T) { f(t, windowed) })
	})
}
