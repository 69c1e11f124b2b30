package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/config"
)

// A request past BATCH_MAX_QUEUE is answered at once with a 429
// rate_limit_error (a 529 would move Claude Code to its fallback model)
// whose retry-after is when the queue will have drained: the one waiting
// and the one in flight, 4 s each as the last call took, 8 s.
func TestQueueFullAnswers429WithTheDrainAsRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var calls atomic.Int32
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if calls.Add(1) == 1 {
				time.Sleep(4 * time.Second) // the service time the drain is estimated from
			} else {
				<-release
			}
			writeMessage(w)
		}, func(c *config.Config) { c.MaxConcurrency = 1; c.MaxSize = 1; c.MaxQueue = 1 })
		if resp, err := rig.post(t, context.Background(), requestJSON); err != nil || resp.StatusCode != 200 {
			t.Fatalf("the first request: %v %v", resp, err)
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		statuses := make(chan int, 2)
		for range 2 { // one in flight, one waiting: the queue is full
			go func() {
				resp, err := rig.post(t, context.Background(), requestJSON)
				if err != nil {
					t.Error(err)
					statuses <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				statuses <- resp.StatusCode
			}()
			synctest.Wait() // one at a time, so the first surely holds the slot
		}
		synctest.Wait()
		if q, st := rig.proxy.Queued(), rig.proxy.GateStats(); q != 1 || st.InFlight != 1 {
			t.Fatalf("before: queued %d, gate %+v", q, st)
		}
		resp, err := rig.post(t, context.Background(), requestJSON)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "8" {
			t.Fatalf("status %d, retry-after %q; want 429 with retry-after 8", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if e := decodeError(t, resp.Body); e.Error.Type != "rate_limit_error" || !strings.Contains(e.Error.Message, "BATCH_MAX_QUEUE=1") {
			t.Fatalf("error body = %+v", e)
		}
		close(release)
		for range 2 {
			if s := <-statuses; s != 200 {
				t.Errorf("a queued request got %d; want 200", s)
			}
		}
	})
}

// A back-pressure answer's retry-after is never 0 (a retry at once, in a
// tight loop) nor past the 60 s Claude Code waits at most (it gives up at
// once on more).
func TestBackPressureRetryAfterBounds(t *testing.T) {
	for _, tc := range []struct {
		wait time.Duration
		want string
	}{{0, "1"}, {200 * time.Millisecond, "1"}, {1001 * time.Millisecond, "2"}, {8 * time.Second, "8"}, {60 * time.Second, "60"}, {10 * time.Minute, "60"}} {
		e := backPressure(tc.wait, "held back")
		rec := httptest.NewRecorder()
		apierror.Write(rec, "req_1", e)
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != tc.want || rec.Header().Get("X-Should-Retry") != "" {
			t.Errorf("wait %s: status %d, retry-after %q, x-should-retry %q; want 429, %s and none", tc.wait, rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("X-Should-Retry"), tc.want)
		}
		if b, ok := apierror.Decode(rec.Body.Bytes()); !ok || b.Error.Type != "rate_limit_error" {
			t.Errorf("wait %s: body %s; want a rate_limit_error", tc.wait, rec.Body)
		}
	}
}
