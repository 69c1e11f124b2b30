package proxy

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/retry"
)

// failing answers the first n calls with status (and headers h), then with a
// message; calls counts every call.
func failing(n int32, status int, h map[string]string, calls *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if calls.Add(1) <= n {
			for k, v := range h {
				w.Header().Set(k, v)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_up"}`)
			return
		}
		writeMessage(w)
	}
}

func TestRetriesInPlace(t *testing.T) {
	for _, tc := range []struct {
		name       string
		failures   int32
		status     int
		header     map[string]string
		windowed   bool
		wantStatus int
		wantCalls  int32
		wantTook   time.Duration // after the 1 ms window
	}{
		{"529 twice then ok: backoff 0.5s then 1s", 2, 529, nil, true, 200, 3, 1500 * time.Millisecond},
		{"429 honours retry-after", 1, 429, map[string]string{"Retry-After": "3"}, true, 200, 2, 3 * time.Second},
		{"retry-after-ms beats retry-after", 1, 503, map[string]string{"Retry-After-Ms": "1200", "Retry-After": "9"}, true, 200, 2, 1200 * time.Millisecond},
		{"500 retried", 1, 500, nil, true, 200, 2, 500 * time.Millisecond},
		{"x-should-retry false is obeyed", 1, 529, map[string]string{"X-Should-Retry": "false"}, true, 529, 1, 0},
		{"other 4xx never retried", 1, 400, nil, true, 400, 1, 0},
		{"gives up after RETRY_MAX_ATTEMPTS with the upstream's answer", 9, 529, map[string]string{"Retry-After": "1"}, true, 529, 3, 2 * time.Second},
		{"retry-after past the deadline: give up at once", 9, 429, map[string]string{"Retry-After": "3600"}, true, 429, 1, 0},
		{"plain path is a pass-through", 1, 529, nil, false, 529, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				rig := newBubbleRig(t, tc.windowed, failing(tc.failures, tc.status, tc.header, &calls))
				rig.proxy.rand = func() float64 { return 0 }
				start := time.Now()
				resp, err := rig.post(t, context.Background(), requestJSON)
				if err != nil {
					t.Fatal(err)
				}
				body := readAll(t, resp.Body)
				resp.Body.Close()
				took := time.Since(start)
				if tc.windowed {
					took -= time.Millisecond
				}
				if resp.StatusCode != tc.wantStatus || calls.Load() != tc.wantCalls || took != tc.wantTook {
					t.Fatalf("status %d, %d upstream calls, took %v; want %d, %d, %v", resp.StatusCode, calls.Load(), took, tc.wantStatus, tc.wantCalls, tc.wantTook)
				}
				if tc.wantStatus != 200 {
					if body != `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_up"}` {
						t.Fatalf("body = %q; want the upstream's own error", body)
					}
					if ra := tc.header["Retry-After"]; ra != "" && resp.Header.Get("Retry-After") != ra {
						t.Fatalf("retry-after = %q; want the upstream's %q", resp.Header.Get("Retry-After"), ra)
					}
				}
				synctest.Wait()
				if st := rig.proxy.GateStats(); st.InFlight != 0 || st.Waiting != 0 {
					t.Fatalf("gate = %+v; want empty", st)
				}
			})
		})
	}
}

func TestRetryBudgetSpentReturnsUpstreamAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		rig := newBubbleRig(t, true, failing(9, 529, nil, &calls))
		rig.proxy.budget = retry.NewBudget(0, 0)
		resp, err := rig.post(t, context.Background(), requestJSON)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 529 || calls.Load() != 1 {
			t.Fatalf("status %d after %d calls; want 529 after 1 (no budget)", resp.StatusCode, calls.Load())
		}
	})
}

func TestRetryWaitGivesSlotToOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		rig := newBubbleRig(t, true, failing(1, 529, map[string]string{"Retry-After": "10"}, &calls),
			func(c *config.Config) { c.MaxConcurrency = 1 })
		go func() {
			resp, err := rig.post(t, context.Background(), requestJSON)
			if err == nil {
				resp.Body.Close()
			}
		}()
		time.Sleep(time.Second) // the first request is in its 10 s wait
		start := time.Now()
		resp, err := rig.post(t, context.Background(), requestJSON)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || time.Since(start) > time.Millisecond {
			t.Fatalf("second request: %d after %v; want 200 at once on the slot the retry gave back", resp.StatusCode, time.Since(start))
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if calls.Load() != 3 {
			t.Fatalf("upstream calls = %d; want 3", calls.Load())
		}
	})
}
