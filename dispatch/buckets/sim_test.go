package buckets

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// simRig is a scheduler paced by buckets.Pacing whose members call the
// simulator in process (its handler, no socket), so that its rate limits
// are the simulator's own buckets, in virtual time. Each call is recorded
// with the simulator's debit and refund of the output-token bucket, which
// the test replays to say when the simulator would have admitted a
// request.
type simRig struct {
	*rig
	k   *Pacing
	up  *sim.Server
	otp float64 // the simulator's output-token limit a minute

	mu    sync.Mutex
	calls []simCall
}

// simCall is one call that reached the simulator.
type simCall struct {
	name        string
	tenant      string
	arrived     time.Duration // when Do was called
	start, end  time.Duration // the simulator's admission and its refund
	status      int
	maxTokens   int
	output      int
	debitOutput bool // the simulator debited max_tokens (it admitted it)
}

func newSimRig(t *testing.T, cfg sim.Config, capacity int) *simRig {
	t.Helper()
	up := sim.New(cfg)
	t.Cleanup(up.Close)
	k := &Pacing{Buckets: &pace.Buckets{}}
	r := newRig(t, dispatch.Config{MaxSize: 16, MaxWait: 20 * time.Millisecond, Timeout: 5 * time.Minute, Pacing: k}, capacity)
	return &simRig{rig: r, k: k, up: up, otp: float64(cfg.OutputTokensPerMinute)}
}

// send starts one non-streaming request of maxTokens for tenant on the
// upstream key "k" and returns at once; the outcome arrives on the channel.
func (r *simRig) send(ctx context.Context, name, tenant string, maxTokens int) <-chan outcome {
	return r.sendOutput(ctx, name, tenant, maxTokens, 0)
}

// sendOutput is send for a reply of output tokens (0: the simulator's
// choice).
func (r *simRig) sendOutput(ctx context.Context, name, tenant string, maxTokens, output int) <-chan outcome {
	arrived := r.since()
	out := make(chan outcome, 1)
	body := fmt.Sprintf(`{"model":"claude-haiku-4-5","max_tokens":%d,"messages":[{"role":"user","content":"say something short"}]}`, maxTokens)
	desc := &request.Descriptor{Tenant: tenant, Key: "k", Cost: request.Cost{InputTokens: 10, MaxTokens: maxTokens}}
	go func() {
		err := r.s.Do(ctx, desc, func(ctx context.Context, m *dispatch.Member) error {
			c := simCall{name: name, tenant: tenant, arrived: arrived, start: r.since(), maxTokens: maxTokens}
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/messages", strings.NewReader(body))
			req.Header.Set("x-api-key", "sk-test")
			req.Header.Set("content-type", "application/json")
			req.Header.Set("anthropic-version", "2023-06-01")
			if output > 0 {
				req.Header.Set("x-sim-output-tokens", strconv.Itoa(output))
			}
			rec := httptest.NewRecorder()
			r.up.ServeHTTP(rec, req) // returns once the simulator has given back the unused output
			c.end, c.status = r.since(), rec.Code
			m.Settle(rec.Code, rec.Header())
			if rec.Code == http.StatusOK {
				var msg struct {
					Usage struct {
						InputTokens  int `json:"input_tokens"`
						OutputTokens int `json:"output_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil {
					return err
				}
				c.output, c.debitOutput = msg.Usage.OutputTokens, true
				m.Used(dispatch.Usage{Input: msg.Usage.InputTokens, Output: msg.Usage.OutputTokens})
			}
			r.mu.Lock()
			r.calls = append(r.calls, c)
			r.mu.Unlock()
			return nil
		})
		out <- outcome{err, r.since()}
	}()
	return out
}

// level is the simulator's output-token bucket at t, replayed from the
// calls: full when the first call came, refilled at its limit a minute,
// debited max_tokens at each admission and given back the unused part at
// each call's end, as sim/ratelimit.go does. Events at t itself count.
func (r *simRig) level(calls []simCall, t time.Duration) float64 {
	type event struct {
		at time.Duration
		n  float64
	}
	var ev []event
	for _, c := range calls {
		if !c.debitOutput {
			continue
		}
		if c.start <= t {
			ev = append(ev, event{c.start, -float64(c.maxTokens)})
		}
		if c.end <= t {
			ev = append(ev, event{c.end, float64(c.maxTokens - c.output)})
		}
	}
	slices.SortStableFunc(ev, func(a, b event) int { return int(a.at - b.at) })
	level, at := r.otp, time.Duration(0)
	if len(calls) > 0 {
		at = calls[0].start
	}
	for _, e := range ev {
		level = math.Min(r.otp, level+r.otp*(e.at-at).Minutes())
		level += e.n
		if e.n > 0 {
			level = math.Min(r.otp, level)
		}
		at = e.at
	}
	return math.Min(r.otp, level+r.otp*(t-at).Minutes())
}

// earliest is when the simulator would first have admitted calls[i], had
// it been sent then: not before it arrived nor before the call admitted
// before it (one tenant's requests keep their order), and with the
// simulator's bucket holding its max_tokens. It is sought to the
// millisecond between then and when it was in fact admitted.
func (r *simRig) earliest(calls []simCall, i int) time.Duration {
	c := calls[i]
	from := c.arrived
	for j := range i {
		if calls[j].tenant == c.tenant {
			from = max(from, calls[j].start)
		}
	}
	for t := from; t < c.start; t += time.Millisecond {
		if r.level(calls, t) >= float64(c.maxTokens) {
			return t
		}
	}
	return c.start
}

func (r *simRig) recorded() []simCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := slices.Clone(r.calls)
	slices.SortStableFunc(calls, func(a, b simCall) int { return int(a.start - b.start) })
	return calls
}

// outputLimitedSim is the simulator: an output-token limit of
// 2,400 a minute (40 a second) and short replies, 16-64 tokens, to
// requests that each ask for 1,024.
func outputLimitedSim(otpm int) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.OutputTokensPerMinute = otpm
	cfg.TTFT = 250 * time.Millisecond
	cfg.PerToken = 5 * time.Millisecond
	cfg.OutputTokensMin, cfg.OutputTokensMax = 16, 64
	return cfg
}

// An organisation limited on output tokens whose requests ask for far
// more than they use: the unused part of each max_tokens comes back to
// the simulator's bucket when its answer ends, and a held request must go
// once the simulator's bucket would admit it, not tens of seconds later
// (nothing re-checked the line when a request's refund came, and each
// answer's headers, made when it was admitted, clamped away the refunds
// given since), and never so early that the simulator answers 429.
func TestBucketsPaceAnOutputLimitAsTheSimulatorsBucketAdmits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSimRig(t, outputLimitedSim(2400), 8)
		ctx := context.Background()
		var outs []<-chan outcome
		for i := range 20 {
			outs = append(outs, r.send(ctx, fmt.Sprintf("r%02d", i), "", 1024))
			time.Sleep(time.Second / 3)
		}
		var last, worst time.Duration
		for i, o := range outs {
			o := <-o
			if o.err != nil {
				t.Errorf("r%02d: %v", i, o.err)
			}
			last = max(last, o.at)
		}
		calls := r.recorded()
		for i, c := range calls {
			if c.status != http.StatusOK {
				t.Errorf("%s admitted at %v: the simulator answered %d", c.name, c.start, c.status)
			}
			e := r.earliest(calls, i)
			worst = max(worst, c.start-e)
			// The headers round what remains to thousands, so sluice's
			// estimate may be some hundreds of tokens below the
			// simulator's level, and a request the simulator would admit
			// by that little margin waits for the answer in flight to
			// give back its unused output: one answer's time, 0.25 s and
			// 64 tokens of 5 ms at most (10 % jitter), and the window's
			// 20 ms.
			if late := c.start - e; late > 700*time.Millisecond {
				t.Errorf("%s arrived at %v, admitted at %v: %v after the simulator's bucket would have admitted it (at %v)", c.name, c.arrived, c.start, late, e)
			}
		}
		t.Logf("the last of 20 answered at %v; a request admitted at most %v after the simulator's bucket would have", last, worst)
	})
}

// sendEvery sends n requests of maxTokens for tenant, one every gap from
// now on, and returns their outcomes' channels.
func (r *simRig) sendEvery(ctx context.Context, tenant string, n, maxTokens, output int, gap time.Duration) []<-chan outcome {
	outs := make([]<-chan outcome, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			outs[i] = r.sendOutput(ctx, fmt.Sprintf("%s%02d", tenant, i), tenant, maxTokens, output)
			time.Sleep(gap)
		}
	}()
	<-done
	return outs
}

// waits is how long each of tenant's calls waited to reach the
// simulator, in order.
func waits(calls []simCall, tenant string) []time.Duration {
	var w []time.Duration
	for _, c := range calls {
		if c.tenant == tenant {
			w = append(w, c.start-c.arrived)
		}
	}
	return w
}

func quantile(w []time.Duration, q float64) time.Duration {
	s := slices.Clone(w)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// Two tenants on one upstream key limited to 8,000 output tokens a
// minute: b sends a small request (512 max_tokens, 50 used) every half
// second, a one that asks for the whole bucket every 3 s and uses 1,000
// of it, more than the limit refills. a's head, which needs a full
// bucket, must not hold b's requests that fit for long (with it in front
// of them b waited 58 s at the median), and must not be starved by them
// either: it goes within the bound keyLine documents, passGrace and twice
// the time its cost takes to refill from empty.
func TestBucketsALargeHeadDoesNotHoldAnotherTenantsSmallRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSimRig(t, outputLimitedSim(8000), 8)
		ctx := context.Background()
		// One answer first, so that sluice knows the key's limits: until
		// then it lets anything go.
		if o := <-r.send(ctx, "first", "b", 16); o.err != nil {
			t.Fatal(o.err)
		}
		var a, b []<-chan outcome
		done := make(chan struct{})
		go func() {
			defer close(done)
			a = r.sendEvery(ctx, "a", 10, 8000, 1000, 3*time.Second)
		}()
		time.Sleep(time.Second / 4)
		b = r.sendEvery(ctx, "b", 60, 512, 50, time.Second/2)
		<-done
		for i, o := range append(a, b...) {
			if o := <-o; o.err != nil {
				t.Errorf("request %d: %v", i, o.err)
			}
		}
		calls := r.recorded()
		for _, c := range calls {
			if c.status != http.StatusOK {
				t.Errorf("%s admitted at %v: the simulator answered %d", c.name, c.start, c.status)
			}
		}
		wa, wb := waits(calls, "a"), waits(calls, "b")
		if len(wa) != 10 || len(wb) != 61 {
			t.Fatalf("%d of a's and %d of b's requests reached the simulator; want 10 and 61", len(wa), len(wb))
		}
		t.Logf("b's wait: p50 %v, max %v; a's: p50 %v, max %v", quantile(wb, 0.5), quantile(wb, 1), quantile(wa, 0.5), quantile(wa, 1))
		if p50 := quantile(wb, 0.5); p50 > 100*time.Millisecond {
			t.Errorf("b's requests waited %v at the median behind a's; want no more than the window's wait", p50)
		}
		if worst := quantile(wb, 1); worst > 10*time.Second {
			t.Errorf("b's requests waited up to %v; want a's reservations to hold them a few seconds at most", worst)
		}
		// Each of a's requests, once at the head of a's queue, goes
		// within passGrace and twice its cost's refill from empty.
		var prev time.Duration
		for _, c := range calls {
			if c.tenant != "a" {
				continue
			}
			if head := c.start - max(c.arrived, prev); head > passGrace+2*time.Minute {
				t.Errorf("%s waited %v at the head of a's queue; want at most 2 min 1 s", c.name, head)
			}
			prev = c.start
		}
	})
}
