package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sluicehq/sluice/config"
)

func TestQueueFullAnswers529WithRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			<-release
			writeMessage(w)
		}, func(c *config.Config) { c.MaxConcurrency = 1; c.MaxSize = 1; c.MaxQueue = 1 })
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
		if resp.StatusCode != 529 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("status %d, retry-after %q; want 529 with a retry-after", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if e := decodeError(t, resp.Body); e.Error.Type != "overloaded_error" || !strings.Contains(e.Error.Message, "BATCH_MAX_QUEUE=1") {
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
