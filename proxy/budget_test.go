package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkv1 "github.com/anthropics/anthropic-sdk-go"
	optv1 "github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// testKeyHash is the short hash sk-test (post's key) is budgeted by.
var testKeyHash = request.Tenant(http.Header{"X-Api-Key": {"sk-test"}})

// withBudget is a config edit adding a budget on sk-test's key.
func withBudget(sp budget.Spec) func(*config.Config) {
	return func(c *config.Config) {
		if sp.Tenant == "" {
			sp.Key = testKeyHash
		}
		if err := sp.Check(); err != nil {
			panic(err)
		}
		c.Budgets = append(c.Budgets, sp)
	}
}

// Past a hard budget a request is answered at once, on both paths, with
// a 402 billing_error that says which budget, what was spent of what
// limit and when it resets, and x-should-retry: false; the upstream
// never sees it. messageJSON's answer is 16 tokens.
func TestBudgetRefusesPastItsLimit(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		var calls atomic.Int64
		up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1); apiHandler(w, r) })
		_, srv := startProxy(t, testConfig(t, up.URL, windowed, withBudget(budget.Spec{Unit: budget.Tokens, Limit: 30, Period: budget.Day})))
		for i := range 2 {
			if resp := post(t, srv.URL, "/v1/messages", requestJSON); resp.StatusCode != http.StatusOK {
				t.Fatalf("request %d under the budget: %d %s", i+1, resp.StatusCode, readAll(t, resp.Body))
			}
		}
		resp := post(t, srv.URL, "/v1/messages", requestJSON)
		body := readAll(t, resp.Body)
		if resp.StatusCode != http.StatusPaymentRequired || resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("past the budget: %d, x-should-retry %q, retry-after %q: %s", resp.StatusCode, resp.Header.Get("X-Should-Retry"), resp.Header.Get("Retry-After"), body)
		}
		e, ok := apierror.Decode([]byte(body))
		if !ok || e.Error.Type != "billing_error" || e.RequestID == "" {
			t.Fatalf("not an Anthropic billing_error: %s", body)
		}
		for _, want := range []string{"key:" + testKeyHash + ":day:tokens", "32 tokens of its 30 tokens limit", "resets at "} {
			if !strings.Contains(e.Error.Message, want) {
				t.Errorf("message %q does not say %q", e.Error.Message, want)
			}
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("the upstream saw %d calls, want 2: the refused one never goes up", n)
		}
		// A streaming request is refused the same way, before its stream.
		if resp := post(t, srv.URL, "/v1/messages", streamRequestJSON); resp.StatusCode != http.StatusPaymentRequired {
			t.Errorf("a stream past the budget: %d", resp.StatusCode)
		}
	})
}

// The official SDK does not retry the refusal: one attempt, whatever its
// retry budget (it would retry a 429 or a 5xx twice).
func TestBudgetRefusalNotRetriedBySDK(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		up := startUpstream(t, apiHandler)
		_, srv := startProxy(t, testConfig(t, up.URL, windowed, withBudget(budget.Spec{Unit: budget.Tokens, Limit: 1, Period: budget.Month})))
		var attempts atomic.Int64
		hc := &http.Client{Transport: countingTransport{&attempts, http.DefaultTransport}}
		client := sdkv1.NewClient(optv1.WithAPIKey("sk-test"), optv1.WithBaseURL(srv.URL), optv1.WithHTTPClient(hc), optv1.WithMaxRetries(2))
		params := sdkv1.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 64,
			Messages: []sdkv1.MessageParam{sdkv1.NewUserMessage(sdkv1.NewTextBlock("hi"))}}
		if _, err := client.Messages.New(context.Background(), params); err != nil {
			t.Fatal(err)
		}
		_, err := client.Messages.New(context.Background(), params)
		var ae *sdkv1.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusPaymentRequired {
			t.Fatalf("past the budget the SDK got %v, want a 402", err)
		}
		if n := attempts.Load(); n != 2 {
			t.Errorf("%d attempts for two calls: the SDK retried the refusal", n)
		}
	})
}

type countingTransport struct {
	n  *atomic.Int64
	rt http.RoundTripper
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// A request in flight is never cut: requests admitted before the budget
// was crossed are all answered, and the overshoot is what they spent past
// the limit, at most what was in flight. Measured here: inFlight requests
// of 16 tokens each held upstream together, under a 20-token budget.
func TestBudgetOvershootBoundedByInFlight(t *testing.T) {
	const inFlight = 6
	bothModes(t, func(t *testing.T, windowed bool) {
		var arrived sync.WaitGroup
		arrived.Add(inFlight)
		release := make(chan struct{})
		up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			arrived.Done()
			<-release
			apiHandler(w, r)
		})
		p, srv := startProxy(t, testConfig(t, up.URL, windowed, func(c *config.Config) { c.MaxConcurrency = inFlight },
			withBudget(budget.Spec{Unit: budget.Tokens, Limit: 20, Period: budget.Day})))
		codes := make(chan int, inFlight)
		for range inFlight {
			go func() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(requestJSON))
				req.Header.Set("X-Api-Key", "sk-test")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					codes <- 0
					return
				}
				resp.Body.Close()
				codes <- resp.StatusCode
			}()
		}
		arrived.Wait() // all in flight, none answered: the budget is untouched
		close(release)
		for range inFlight {
			if c := <-codes; c != http.StatusOK {
				t.Errorf("a request in flight when the budget was crossed got %d, want its answer", c)
			}
		}
		st := p.budgets.Statuses()[0]
		const spent = inFlight * 16
		if st.Spent != spent || st.Overshoot != spent-20 || !st.Exceeded {
			t.Errorf("status %+v; want spent %d, overshoot %d", st, spent, spent-20)
		}
		if st.Overshoot > inFlight*16 {
			t.Errorf("overshoot %v is more than was in flight (%d)", st.Overshoot, inFlight*16)
		}
		t.Logf("overshoot with %d requests of 16 tokens in flight under a 20-token budget: %v tokens", inFlight, st.Overshoot)
		if resp := post(t, srv.URL, "/v1/messages", requestJSON); resp.StatusCode != http.StatusPaymentRequired {
			t.Errorf("after the crossing: %d, want 402", resp.StatusCode)
		}
		_, metrics := get(t, srv.URL+"/metrics")
		for _, want := range []string{`sluice_budget_overshoot{budget="key:` + testKeyHash + `:day:tokens",unit="tokens"} 76`,
			`sluice_budget_refused_total{budget="key:` + testKeyHash + `:day:tokens"} 1`} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics has no %s", want)
			}
		}
	})
}

// Under inbound keys a key's budget names the sluice key by its short
// hash (the keys file's sha256, cut to 16 digits), not the held key every
// request goes up with: one key's spent budget refuses it alone.
func TestBudgetOfAnInboundKey(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		s := startSim(t)
		keys := filepath.Join(t.TempDir(), "keys.json")
		writeKeys(t, keys, keyEntry("alice", ""), keyEntry("bob", ""))
		in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(sluiceKey("alice")))
		cfg := testConfig(t, simURL(s), windowed, func(c *config.Config) {
			sp := budget.Spec{Key: hex.EncodeToString(sum[:]), Unit: budget.Tokens, Limit: 1, Period: budget.Day}
			if err := sp.Check(); err != nil {
				t.Fatal(err)
			}
			c.Budgets = []budget.Spec{sp}
		})
		_, srv := startProxyWith(t, cfg, Options{Inbound: in})
		for i, want := range []int{200, 402} {
			if code, body := send(t, "POST", srv.URL+"/v1/messages", requestJSON, "x-api-key", sluiceKey("alice")); code != want {
				t.Errorf("alice's request %d: %d %s; want %d", i+1, code, body, want)
			}
		}
		if code, body := send(t, "POST", srv.URL+"/v1/messages", requestJSON, "bearer", sluiceKey("bob")); code != 200 {
			t.Errorf("bob, whose budget is not alice's: %d %s", code, body)
		}
	})
}

// A keys file's budget is read as strictly as the config file's: an
// unknown member, a bad period or a missing amount refuses the file,
// naming the key.
func TestKeysFileBudgetRefused(t *testing.T) {
	for name, c := range map[string]struct{ budget, want string }{
		"unknown member": {`{"usdd":5,"period":"day"}`, `unknown field "usdd"`},
		"bad period":     {`{"usd":5,"period":"fortnight"}`, `key 1 ("alice"): budget: period "fortnight"`},
		"no amount":      {`{"period":"day"}`, `key 1 ("alice"): budget: give exactly one of usd and tokens`},
	} {
		keys := filepath.Join(t.TempDir(), "keys.json")
		writeKeys(t, keys, keyEntry("alice", `"budget":`+c.budget))
		_, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", name, err, c.want)
		}
	}
	keys := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, keys, keyEntry("alice", `"budget":{"usd":5,"period":"week","warn_at":4}`))
	in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(sluiceKey("alice")))
	if b := in.Budgets(); len(b) != 1 || b[0].Name != "key:alice:week:usd" || b[0].Key != hex.EncodeToString(sum[:8]) || b[0].Limit != 5 || b[0].Warn != 4 {
		t.Errorf("alice's budget: %+v", b)
	}
}

// Issue 37: a budget binds the queue, not only arrivals. A tenant's
// requests queued behind BATCH_MAX_CONCURRENCY=2 when its budget is
// crossed are refused as each is released, with the arrival check's own
// 402: what is spent past the limit is at most the calls in flight at the
// crossing (two answers), where it was the whole queue. The first two
// calls are held upstream until every other request waits in the queue,
// so that none is refused on arrival.
func TestBudgetBindsTheQueue(t *testing.T) {
	const (
		queued      = 20
		concurrency = 2
		perAnswer   = 16 // tokens: messageJSON's usage
		limit       = 20
	)
	var calls atomic.Int64
	release := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= concurrency {
			<-release
		}
		apiHandler(w, r)
	})
	p, srv := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) { c.MaxConcurrency = concurrency },
		withBudget(budget.Spec{Unit: budget.Tokens, Limit: limit, Period: budget.Day})))
	type answer struct {
		code int
		body string
	}
	answers := make(chan answer, queued)
	for range queued {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(requestJSON))
			req.Header.Set("X-Api-Key", "sk-test")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{0, err.Error()}
				return
			}
			defer resp.Body.Close()
			answers <- answer{resp.StatusCode, readAll(t, resp.Body)}
		}()
	}
	waitUntil(t, "two calls upstream and the rest queued", func() bool {
		return calls.Load() == concurrency && p.sched.Queued() == queued-concurrency
	})
	close(release)
	var ok, refused int
	for range queued {
		a := <-answers
		switch a.code {
		case http.StatusOK:
			ok++
		case http.StatusPaymentRequired:
			refused++
			e, isErr := apierror.Decode([]byte(a.body))
			if !isErr || e.Error.Type != "billing_error" || !strings.Contains(e.Error.Message, "is spent") ||
				!strings.Contains(e.Error.Message, "ask sluice's operator to raise the budget") {
				t.Errorf("a request refused at its release: %s; want the arrival check's billing_error", a.body)
			}
		default:
			t.Errorf("a queued request got %d %s; want 200 or 402", a.code, a.body)
		}
	}
	st := p.budgets.Statuses()[0]
	t.Logf("%d queued behind %d slots under a %d-token budget: %d answered, %d refused, %d calls, %v tokens spent, overshoot %v",
		queued, concurrency, limit, ok, refused, calls.Load(), st.Spent, st.Overshoot)
	if st.Overshoot > concurrency*perAnswer {
		t.Errorf("overshoot %v tokens: more than the %d calls in flight at the crossing could spend (%d)", st.Overshoot, concurrency, concurrency*perAnswer)
	}
	if n := calls.Load(); n != int64(ok) || st.Spent != float64(ok*perAnswer) {
		t.Errorf("%d calls upstream, %d answered, %v spent: the books and the calls disagree", n, ok, st.Spent)
	}
	if ok+refused != queued || refused < queued-(limit/perAnswer+1+concurrency) {
		t.Errorf("%d answered, %d refused of %d queued", ok, refused, queued)
	}
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// batchJSON is a Message Batches create body of n requests of max_tokens
// 64, each with its own custom_id.
func batchJSON(n int) string {
	var b strings.Builder
	b.WriteString(`{"requests":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"custom_id":"r%d","params":%s}`, i, requestJSON)
	}
	b.WriteString(`]}`)
	return b.String()
}

// Issue 37: a budget binds Message Batches too. Past its budget a key's
// batch create is refused with the 402 its Messages get; under it, a
// batch is held at its estimated cost (every request's prompt and
// max_tokens, at the batch price) from its acceptance, a batch that does
// not fit in what is left is refused before it reaches the upstream, and
// the results read through sluice are counted at the batch price, the
// hold given back. The simulator runs the batches.
func TestBudgetBindsMessageBatches(t *testing.T) {
	c := sim.DefaultConfig()
	c.TTFT, c.PerToken, c.BatchDuration = 0, 0, 50*time.Millisecond
	s := sim.New(c)
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })

	t.Run("past its budget", func(t *testing.T) {
		p, srv := startProxy(t, testConfig(t, up.URL, false, withBudget(budget.Spec{Unit: budget.Tokens, Limit: 1, Period: budget.Day})))
		if code, body := send(t, "POST", srv.URL+"/v1/messages", requestJSON, "x-api-key", "sk-test"); code != 200 {
			t.Fatalf("the first request: %d %s", code, body)
		}
		if code, _ := send(t, "POST", srv.URL+"/v1/messages", requestJSON, "x-api-key", "sk-test"); code != 402 {
			t.Fatalf("a request past the budget: %d", code)
		}
		before := s.Stats()
		code, body := send(t, "POST", srv.URL+"/v1/messages/batches", batchJSON(2), "x-api-key", "sk-test")
		if code != http.StatusPaymentRequired || errorType(t, body) != "billing_error" {
			t.Errorf("a batch create past the budget: %d %s; want the 402 its Messages get", code, body)
		}
		if after := s.Stats(); after.Requests != before.Requests {
			t.Errorf("the refused batch reached the upstream")
		}
		_ = p
	})

	t.Run("held until its results", func(t *testing.T) {
		p, srv := startProxy(t, testConfig(t, up.URL, false, withBudget(budget.Spec{Unit: budget.Tokens, Limit: 200, Period: budget.Day})))
		code, body := send(t, "POST", srv.URL+"/v1/messages/batches", batchJSON(2), "x-api-key", "sk-test")
		if code != 200 {
			t.Fatalf("a batch within the budget: %d %s", code, body)
		}
		var b struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(body), &b); err != nil || b.ID == "" {
			t.Fatalf("batch object %s", body)
		}
		st := p.budgets.Statuses()[0]
		if st.Held < 2*64 || st.Held > 200 || st.Spent != 0 {
			t.Fatalf("after the create: %+v; want its estimate (2 × 64 tokens of output and the prompts) held", st)
		}
		code, body = send(t, "POST", srv.URL+"/v1/messages/batches", batchJSON(2), "x-api-key", "sk-test")
		if code != http.StatusPaymentRequired || !strings.Contains(body, "estimated cost") {
			t.Errorf("a second batch that does not fit in what is left: %d %s", code, body)
		}
		waitUntil(t, "the batch to end", func() bool {
			_, body := send(t, "GET", srv.URL+"/v1/messages/batches/"+b.ID, "", "x-api-key", "sk-test")
			return strings.Contains(body, `"processing_status":"ended"`)
		})
		code, results := send(t, "GET", srv.URL+"/v1/messages/batches/"+b.ID+"/results", "", "x-api-key", "sk-test")
		if code != 200 {
			t.Fatalf("results: %d %s", code, results)
		}
		var tokens int64
		for line := range strings.Lines(results) {
			var l struct {
				Result struct {
					Type    string `json:"type"`
					Message struct {
						Usage struct {
							In  int64 `json:"input_tokens"`
							Out int64 `json:"output_tokens"`
						} `json:"usage"`
					} `json:"message"`
				} `json:"result"`
			}
			if json.Unmarshal([]byte(line), &l) != nil || l.Result.Type != "succeeded" {
				t.Fatalf("results line %q", line)
			}
			tokens += l.Result.Message.Usage.In + l.Result.Message.Usage.Out
		}
		// The last line is counted, and the hold given back, as the
		// relay reads the end of the results, which may be just after
		// the client has them all.
		waitUntil(t, "the results counted and the hold given back", func() bool {
			st = p.budgets.Statuses()[0]
			return st.Held == 0 && st.Spent == float64(tokens)
		})
		// Read again, they are not counted again.
		send(t, "GET", srv.URL+"/v1/messages/batches/"+b.ID+"/results", "", "x-api-key", "sk-test")
		if again := p.budgets.Statuses()[0]; again.Spent != st.Spent {
			t.Errorf("results read twice counted twice: %v then %v", st.Spent, again.Spent)
		}
	})
}
