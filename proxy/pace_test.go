package proxy

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
)

func TestExhaustedRateLimitHoldsCallsUntilResetInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		type call struct {
			body string
			at   time.Time
		}
		var calls []call
		var reset time.Time
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			calls = append(calls, call{string(body), time.Now()})
			first := len(calls) == 1
			mu.Unlock()
			if first { // the last request this minute: nothing left until reset
				reset = time.Now().Add(5 * time.Second).Truncate(time.Second)
				w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "0")
				w.Header().Set("Anthropic-Ratelimit-Requests-Reset", reset.UTC().Format(time.RFC3339))
			}
			writeMessage(w)
		}, func(c *config.Config) { c.MaxConcurrency = 2; c.MaxSize = 1 })
		send := func(name string) <-chan int {
			done := make(chan int, 1)
			go func() {
				resp, err := rig.post(t, context.Background(), `{"model":"m","max_tokens":1,"messages":[],"n":"`+name+`"}`)
				if err != nil {
					t.Error(err)
					done <- 0
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done <- resp.StatusCode
			}()
			return done
		}
		if s := <-send("a"); s != 200 {
			t.Fatalf("first status %d", s)
		}
		var waits []<-chan int
		for _, n := range []string{"b", "c", "d", "e"} {
			waits = append(waits, send(n))
			synctest.Wait()
		}
		mu.Lock()
		if len(calls) != 1 {
			t.Fatalf("%d upstream calls during the hold; want 1", len(calls))
		}
		mu.Unlock()
		// b and c, first in line, hold the two slots through the hold; d and e
		// keep their places behind them.
		if st := rig.proxy.GateStats(); st.InFlight != 2 || st.Waiting != 2 {
			t.Fatalf("gate during the hold = %+v; want 2 slots held, 2 waiting", st)
		}
		for _, w := range waits {
			if s := <-w; s != 200 {
				t.Fatalf("status %d", s)
			}
		}
		// All four go at the reset, in the same (virtual) instant, so the
		// order the upstream sees them in is the scheduler's, not the gate's:
		// the gate's order is checked above.
		var names []string
		for _, c := range calls[1:] {
			if c.at.Before(reset) {
				t.Errorf("call %s at %v, before the reset %v", c.body, c.at, reset)
			}
			names = append(names, c.body[strings.Index(c.body, `"n":`)+5:][:1])
		}
		slices.Sort(names)
		if got := strings.Join(names, ""); got != "bcde" {
			t.Errorf("calls after the hold = %s; want b, c, d and e once each", got)
		}
		if st := rig.proxy.GateStats(); st.InFlight != 0 || st.Waiting != 0 {
			t.Fatalf("gate = %+v; want empty", st)
		}
	})
}
