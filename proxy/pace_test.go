package proxy

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
)

// RATE_LIMIT_PACING=reset: an exhausted limit holds every granted request,
// in its slot, until the limit's reset.
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
		}, func(c *config.Config) { c.MaxConcurrency = 2; c.MaxSize = 1; c.RateLimitPacing = config.PacingReset })
		send := func(name string) <-chan int {
			return statusOf(t, func() (*http.Response, error) {
				return rig.post(t, context.Background(), `{"model":"m","max_tokens":1,"messages":[],"n":"`+name+`"}`)
			})
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

// RATE_LIMIT_PACING=buckets (the default): a key whose input-token bucket
// is spent has its requests held outside the gate, each until its cost has
// refilled, not until the bucket is full; another key's requests go at
// once; and the upstream sees no 429.
func TestSpentBucketHoldsItsKeyOutsideTheGateAndOnlyUntilItsCostRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		type call struct {
			key string
			at  time.Duration
		}
		var calls []call
		start := time.Now()
		level := 6000.0 // key a's bucket: 60,000 a minute, 1,000 a second
		last := start
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			key := r.Header.Get("X-Api-Key")
			mu.Lock()
			calls = append(calls, call{key, time.Since(start)})
			if key == "key-a" {
				now := time.Now()
				level = min(60000, level+1000*now.Sub(last).Seconds())
				last = now
				if level < 5000 {
					mu.Unlock()
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(http.StatusTooManyRequests)
					io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"over the limit"}}`)
					return
				}
				level -= 5000
				w.Header().Set("Anthropic-Ratelimit-Input-Tokens-Limit", "60000")
				w.Header().Set("Anthropic-Ratelimit-Input-Tokens-Remaining", strconv.Itoa(int(level/1000+0.5)*1000))
				w.Header().Set("Anthropic-Ratelimit-Input-Tokens-Reset", time.Now().Add(time.Minute).UTC().Format(time.RFC3339))
			}
			mu.Unlock()
			// Its usage agrees with what the bucket was debited.
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":5000,"output_tokens":1}}`)
		}, func(c *config.Config) { c.MaxConcurrency = 4; c.MaxSize = 1 })
		// About 5,000 tokens each (request.CharsPerToken characters a token).
		prompt := strings.Repeat("x", 5000*4-200)
		send := func(key string) <-chan int {
			return statusOf(t, func() (*http.Response, error) {
				req, _ := http.NewRequest("POST", rig.url+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"`+prompt+`"}]}`))
				req.Header.Set("X-Api-Key", key)
				return rig.client.Do(req)
			})
		}
		if s := <-send("key-a"); s != 200 {
			t.Fatalf("first status %d", s)
		}
		// 1,000 left on key a: three more of 5,000 each need 4, 9 and
		// 14 s of refill; key b's request goes at once.
		var waits []<-chan int
		for range 3 {
			waits = append(waits, send("key-a"))
			synctest.Wait()
		}
		b := send("key-b")
		if s := <-b; s != 200 {
			t.Fatalf("key b: status %d", s)
		}
		synctest.Wait()
		if st := rig.proxy.GateStats(); st.InFlight != 0 || st.Waiting != 0 {
			t.Errorf("gate while key a is held: %+v; want nobody in it", st)
		}
		for _, w := range waits {
			if s := <-w; s != 200 {
				t.Errorf("key a: status %d", s)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(calls) != 5 {
			t.Fatalf("upstream calls %v; want 5, none of them refused", calls)
		}
		if calls[1].key != "key-b" {
			t.Errorf("calls %v; want key b's second, before key a's held ones", calls)
		}
		for i, c := range calls[2:] {
			// The estimate (5,000 tokens less the 500 of rounding slack)
			// may let each go up to half a second early; the bucket's true
			// level, 1,000 plus the refill, takes it all the same.
			want := time.Duration(4+5*i) * time.Second
			if c.at < want-time.Second || c.at > want+time.Second {
				t.Errorf("key a's held call %d at %v; want about %v, not the bucket's reset a minute on", i, c.at, want)
			}
		}
	})
}

// statusOf runs do in a goroutine and sends the status of its response,
// read to the end, or 0 when it failed.
func statusOf(t *testing.T, do func() (*http.Response, error)) <-chan int {
	done := make(chan int, 1)
	go func() {
		resp, err := do()
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

// Under the default RATE_LIMIT_PACING=buckets, a request whose deadline
// passes while the upstream refuses the organization's calls with a 429 is
// answered 429 with the wait the upstream asked for, not retry-after: 1
// (issue 25: the reset mode's model was read in every mode, and fed only
// in its own).
func TestDeadlineAfterUpstream429SaysTheUpstreamsRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if r.Header.Get("X-Api-Key") == "key-a" {
				time.Sleep(time.Second)
				w.Header().Set("Retry-After", "20")
				w.WriteHeader(http.StatusTooManyRequests)
				io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"over the limit"}}`)
				return
			}
			<-r.Context().Done() // key b's call outlasts its deadline
		}, func(c *config.Config) {
			c.MaxConcurrency, c.MaxSize, c.RetryMaxAttempts, c.Timeout = 2, 1, 1, 3*time.Second
		})
		send := func(key string) *http.Response {
			req, _ := http.NewRequest("POST", rig.url+"/v1/messages", strings.NewReader(`{"model":"m","max_tokens":1,"messages":[]}`))
			req.Header.Set("X-Api-Key", key)
			resp, err := rig.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
		refused := make(chan *http.Response, 1)
		go func() { refused <- send("key-a") }() // answered 429 at 1 s
		synctest.Wait()
		resp := send("key-b") // its deadline passes at 3 s
		if a := <-refused; a.StatusCode != 429 || a.Header.Get("Retry-After") != "20" {
			t.Fatalf("key a: %d retry-after %q; want the upstream's 429 and 20", a.StatusCode, a.Header.Get("Retry-After"))
		}
		if resp.StatusCode != 429 {
			t.Fatalf("status %d; want 429", resp.StatusCode)
		}
		// The upstream asked for 20 s at 1 s: 18 s remain at 3 s.
		if got := resp.Header.Get("Retry-After"); got != "18" {
			t.Errorf("retry-after %q; want 18, what remains of the upstream's 20 s", got)
		}
	})
}
