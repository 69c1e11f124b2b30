package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// try is one Messages request a client made.
type try struct {
	at         time.Time
	model      string
	refused    bool
	status     int    // the answer's status (a front's record)
	retryAfter string // its retry-after
}

// refusing answers the first n Messages requests with answer, written as
// sluice writes its own, and hands every other request to a simulator; it
// records each Messages request.
type refusing struct {
	sim    http.Handler
	answer *apierror.Error
	n      int

	mu    sync.Mutex
	tries []try
}

func (f *refusing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		f.sim.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	var m struct {
		Model string `json:"model"`
	}
	json.Unmarshal(body, &m)
	f.mu.Lock()
	refuse := len(f.tries) < f.n
	f.tries = append(f.tries, try{at: time.Now(), model: m.Model, refused: refuse})
	f.mu.Unlock()
	if refuse {
		apierror.Write(w, apierror.NewRequestID(), f.answer)
		return
	}
	r.Body = io.NopCloser(strings.NewReader(string(body)))
	f.sim.ServeHTTP(w, r)
}

// Tries is a copy of the Messages requests so far.
func (f *refusing) Tries() []try {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]try(nil), f.tries...)
}

// startRefusing serves a refusing front of a fast simulator (no tool
// calls) on loopback.
func startRefusing(t *testing.T, answer *apierror.Error, n int) (string, *refusing) {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.ToolUseShare = -1
	cfg.TTFT = 50 * time.Millisecond
	s := sim.New(cfg)
	f := &refusing{sim: s, answer: answer, n: n}
	srv := httptest.NewServer(f)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return srv.URL, f
}

// reaction is what one client did with a run of refusals.
type reaction struct {
	tries   []try
	ok      bool   // the task finished
	model   string // the model of the request that was answered
	outcome string // the error it ended with, when it did not finish
	took    time.Duration
}

// gaps are the waits between a client's tries, in seconds.
func (r reaction) gaps() []float64 {
	var g []float64
	for i := 1; i < len(r.tries); i++ {
		g = append(g, r.tries[i].at.Sub(r.tries[i-1].at).Seconds())
	}
	return g
}

// switched reports whether any try named another model than the first.
func (r reaction) switched() bool {
	for _, t := range r.tries {
		if t.model != r.tries[0].model {
			return true
		}
	}
	return false
}

func (r reaction) String() string {
	gaps := make([]string, 0, len(r.tries))
	for _, g := range r.gaps() {
		gaps = append(gaps, fmt.Sprintf("%.1f", g))
	}
	models := make([]string, 0, len(r.tries))
	for _, t := range r.tries {
		models = append(models, t.model)
	}
	end := "finished on " + r.model
	if !r.ok {
		end = "failed: " + r.outcome
	}
	return fmt.Sprintf("%d tries, gaps [%s] s, models %v, %s, in %.1f s", len(r.tries), strings.Join(gaps, " "), models, end, r.took.Seconds())
}

// finish fills in the tries and the model of the answered one.
func (r *reaction) finish(f *refusing, start time.Time) {
	r.took = time.Since(start)
	r.setTries(f.Tries())
}

func (r *reaction) setTries(tries []try) {
	r.tries = tries
	for _, t := range r.tries {
		if !t.refused {
			r.model = t.model
		}
	}
}

// claudeReaction runs one Claude Code task (`claude -p "Name a colour."
// --model claude-sonnet-4-5 --fallback-model claude-haiku-4-5
// --max-turns 1`) against base.
func claudeReaction(ctx context.Context, bin, base string, f *refusing) reaction {
	start := time.Now()
	home, err := os.MkdirTemp("", "sluice-claude-home-")
	if err != nil {
		return reaction{outcome: err.Error()}
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, bin, "-p", "Name a colour.", "--output-format", "json",
		"--model", "claude-sonnet-4-5", "--fallback-model", "claude-haiku-4-5", "--max-turns", "1")
	cmd.Dir = home
	cmd.Env = claudeEnv(home, base)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var res claudeResult
	r := reaction{}
	if jerr := json.Unmarshal(out, &res); jerr == nil {
		r.ok = res.Subtype == "success" && !res.IsError
		r.outcome = res.Result
	} else {
		r.outcome = fmt.Sprintf("%v: %.300s %.300s", err, out, stderr.String())
	}
	r.finish(f, start)
	return r
}

// typeScriptReaction runs sdk-retry.mjs (the TypeScript SDK at its
// defaults) against base.
func typeScriptReaction(ctx context.Context, base string, f *refusing) reaction {
	start := time.Now()
	cmd := exec.CommandContext(ctx, "node", "sdk-retry.mjs")
	cmd.Env = append(os.Environ(), "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=sk-ts-sdk")
	out, err := cmd.CombinedOutput()
	var res struct {
		OK      bool   `json:"ok"`
		Status  int    `json:"status"`
		Type    string `json:"type"`
		Message string `json:"message"`
	}
	r := reaction{}
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		r.outcome = fmt.Sprintf("%v: %.300s", err, out)
	} else {
		r.ok = res.OK
		r.outcome = fmt.Sprintf("%d %s: %s", res.Status, res.Type, res.Message)
	}
	r.finish(f, start)
	return r
}

// goReaction sends one request with the official Go SDK at its defaults.
func goReaction(ctx context.Context, base string, f *refusing) reaction {
	start := time.Now()
	client := anthropic.NewClient(option.WithAPIKey("sk-go-sdk"), option.WithBaseURL(base))
	_, err := client.Messages.New(ctx, anthropic.MessageNewParams{
		Model:     anthropic.ModelClaudeSonnet4_5,
		MaxTokens: 16,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Name a colour."))},
	})
	r := reaction{ok: err == nil}
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		r.outcome = fmt.Sprintf("%d %s", ae.StatusCode, ae.Type())
	} else if err != nil {
		r.outcome = err.Error()
	}
	r.finish(f, start)
	return r
}

// reactions runs Claude Code, the TypeScript SDK and the Go SDK at once,
// each against its own front that refuses its first n Messages requests
// with answer.
func reactions(t *testing.T, bin string, answer *apierror.Error, n int) (claude, ts, goSDK reaction) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	if bin != "" {
		base, f := startRefusing(t, answer, n)
		wg.Go(func() { claude = claudeReaction(ctx, bin, base, f) })
	}
	base, f := startRefusing(t, answer, n)
	wg.Go(func() { ts = typeScriptReaction(ctx, base, f) })
	gbase, gf := startRefusing(t, answer, n)
	wg.Go(func() { goSDK = goReaction(ctx, gbase, gf) })
	wg.Wait()
	return
}

// TestReactionsSurvey drives each client into a run of answers of each
// shape sluice has made of its own, and logs what it did. It asserts
// nothing: it is the survey behind docs/errors.md's last column
//
//	SLUICE_REACTIONS=1 go test ./clients -run ReactionsSurvey -v
//
// (SLUICE_REACTIONS=ra61,400 runs only the cases whose names hold "ra61"
// or "400").
func TestReactionsSurvey(t *testing.T) {
	if os.Getenv("SLUICE_REACTIONS") == "" {
		t.Skip("SLUICE_REACTIONS=1 runs the survey of client reactions")
	}
	requireClients(t)
	bin := claudeBinary(t)
	for _, tc := range []struct {
		name   string
		answer *apierror.Error
		n      int // tries refused; 4 when 0
	}{
		{"529 overloaded ra1", &apierror.Error{Status: 529, Type: "overloaded_error", RetryAfter: 1, Message: "sluice is overloaded"}, 0},
		{"504 timeout", &apierror.Error{Status: 504, Type: "timeout_error", Message: "sluice gave up after BATCH_TIMEOUT_S"}, 0},
		{"429 rate_limit ra2", &apierror.Error{Status: 429, Type: "rate_limit_error", RetryAfter: 2, Message: "rate limited"}, 0},
		{"402 billing no-retry", &apierror.Error{Status: 402, Type: "billing_error", NoRetry: true, Message: "budget spent"}, 0},
		{"503 api_error ra2", &apierror.Error{Status: 503, Type: "api_error", RetryAfter: 2, Message: "sluice is busy"}, 0},
		{"503 overloaded ra2", &apierror.Error{Status: 503, Type: "overloaded_error", RetryAfter: 2, Message: "sluice is busy"}, 0},
		{"400 invalid_request", &apierror.Error{Status: 400, Type: "invalid_request_error", Message: "bad request"}, 0},
		{"429 rate_limit ra61 once", &apierror.Error{Status: 429, Type: "rate_limit_error", RetryAfter: 61, Message: "rate limited"}, 1},
	} {
		if only := os.Getenv("SLUICE_REACTIONS"); only != "1" && !slices.ContainsFunc(strings.Split(only, ","), func(w string) bool { return strings.Contains(tc.name, w) }) {
			continue
		}
		n := tc.n
		if n == 0 {
			n = 4
		}
		c, ts, g := reactions(t, bin, tc.answer, n)
		t.Logf("%s:\n  claude: %s\n  ts: %s\n  go: %s", tc.name, c, ts, g)
	}
}

// front passes one client's requests to sluice and records each Messages
// request: when, for which model, and sluice's status and retry-after.
type front struct {
	rp    *httputil.ReverseProxy
	mu    sync.Mutex
	tries []try
}

func newFront(t *testing.T, target string) (string, *front) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	f := &front{rp: httputil.NewSingleHostReverseProxy(u)}
	f.rp.FlushInterval = -1
	f.rp.ErrorLog = log.New(io.Discard, "", 0)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return srv.URL, f
}

// recordedWriter notes the status and retry-after of the answer.
type recordedWriter struct {
	http.ResponseWriter
	status     int
	retryAfter string
}

func (w *recordedWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status, w.retryAfter = code, w.Header().Get("Retry-After")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		f.rp.ServeHTTP(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var m struct {
		Model string `json:"model"`
	}
	json.Unmarshal(body, &m)
	at := time.Now()
	rw := &recordedWriter{ResponseWriter: w}
	f.rp.ServeHTTP(rw, r)
	f.mu.Lock()
	f.tries = append(f.tries, try{at: at, model: m.Model, status: rw.status, retryAfter: rw.retryAfter, refused: rw.status != http.StatusOK})
	f.mu.Unlock()
}

func (f *front) Tries() []try {
	f.mu.Lock()
	defer f.mu.Unlock()
	tries := append([]try(nil), f.tries...)
	sort.Slice(tries, func(i, j int) bool { return tries[i].at.Before(tries[j].at) })
	return tries
}

// checkSpacing fails the test for a client that came back sooner than a
// retry-after told it to, or that was told no retry-after, or one past
// what Claude Code waits.
func checkSpacing(t *testing.T, who string, tries []try) {
	t.Helper()
	for i, tr := range tries {
		if !tr.refused {
			continue
		}
		ra, err := strconv.Atoi(tr.retryAfter)
		if err != nil || ra < 1 || ra > 60 {
			t.Errorf("%s: try %d answered %d with retry-after %q; want 1 to 60 s", who, i+1, tr.status, tr.retryAfter)
			continue
		}
		if i+1 < len(tries) {
			// A little slack for the clock: the client's timer and this
			// front's stamps are taken at slightly different moments.
			if gap := tries[i+1].at.Sub(tr.at); gap < time.Duration(ra)*time.Second-100*time.Millisecond {
				t.Errorf("%s: try %d came %s after a %d with retry-after %d", who, i+2, gap.Round(time.Millisecond), tr.status, ra)
			}
		}
	}
}

// TestShedAgentsStayOnTheirModel runs the case issue 36 measured: six
// real Claude Code agents with a fallback model (claude -p --model
// claude-sonnet-4-5 --fallback-model claude-haiku-4-5), the TypeScript
// SDK and the Go SDK, all at once, through windowed sluice with
// BATCH_MAX_CONCURRENCY=1 BATCH_MAX_QUEUE=1 to a simulator that takes
// 3 s to answer (the issue measured 1.5 s; 3 s keeps agents that start
// a few seconds apart on a loaded machine overlapping). sluice sheds many
// of their tries. Every agent must finish on its own model (with sluice's
// old 529s, three of six were answered by the fallback model), no client
// may be told 529 or come back sooner than the retry-after it was given,
// and every retry-after is within what Claude Code waits.
func TestShedAgentsStayOnTheirModel(t *testing.T) {
	requireClients(t)
	bin := claudeBinary(t)
	t.Parallel()
	scfg := sim.DefaultConfig()
	scfg.ToolUseShare = -1
	scfg.TTFT = 3 * time.Second
	s := sim.New(scfg)
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	cfg := config.Default()
	cfg.Enabled = true
	cfg.MaxConcurrency, cfg.MaxQueue = 1, 1
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	base := serveStack(t, cfg, assemble.Env{})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const agents = 6
	var wg sync.WaitGroup
	claude := make([]reaction, agents)
	fronts := make([]*front, agents+2)
	for i := range agents {
		fb, f := newFront(t, base)
		fronts[i] = f
		wg.Go(func() {
			// claudeReaction reads its tries from a refusing front; this
			// one's are the front's, read below.
			claude[i] = claudeReaction(ctx, bin, fb, &refusing{})
		})
	}
	var ts, goSDK reaction
	tsBase, tsFront := newFront(t, base)
	goBase, goFront := newFront(t, base)
	fronts[agents], fronts[agents+1] = tsFront, goFront
	wg.Go(func() { ts = typeScriptReaction(ctx, tsBase, &refusing{}) })
	wg.Go(func() { goSDK = goReaction(ctx, goBase, &refusing{}) })
	wg.Wait()

	refused := 0
	for i, f := range fronts {
		who := fmt.Sprintf("agent %d", i)
		r := &claude[min(i, agents-1)]
		switch i {
		case agents:
			who, r = "the TypeScript SDK", &ts
		case agents + 1:
			who, r = "the Go SDK", &goSDK
		}
		r.setTries(f.Tries())
		for j, tr := range r.tries {
			if tr.refused {
				refused++
			}
			if tr.status == 529 || tr.model != r.tries[0].model {
				t.Errorf("%s: try %d was for %s and answered %d (first try: %s)", who, j+1, tr.model, tr.status, r.tries[0].model)
			}
		}
		checkSpacing(t, who, r.tries)
		t.Logf("%s: %s; statuses %v", who, r, statuses(r.tries))
		if i < agents && !r.ok {
			t.Errorf("%s did not finish: %s", who, r.outcome)
		}
	}
	if refused == 0 {
		t.Error("sluice refused no try: the test did not shed anything")
	}
}

func statuses(tries []try) []string {
	out := make([]string, len(tries))
	for i, t := range tries {
		out[i] = strconv.Itoa(t.status)
		if t.retryAfter != "" {
			out[i] += "/" + t.retryAfter + "s"
		}
	}
	return out
}

// TestSpentBudgetStopsClientsAtOnce: through sluice with a spent budget
// on each client's key, Claude Code (with a fallback model), the
// TypeScript SDK and the Go SDK each make one try, get the 402
// billing_error, and stop: no retry, no other model; Claude Code shows
// the budget's message.
func TestSpentBudgetStopsClientsAtOnce(t *testing.T) {
	requireClients(t)
	bin := claudeBinary(t)
	t.Parallel()
	scfg := sim.DefaultConfig()
	scfg.ToolUseShare = -1
	s := sim.New(scfg)
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	cfg := config.Default()
	cfg.Enabled = true
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	keys := []string{"sk-claude-code", "sk-ts-sdk", "sk-go-sdk"}
	for _, k := range keys {
		sp := budget.Spec{Key: request.Tenant(http.Header{"X-Api-Key": {k}}), Unit: budget.Tokens, Limit: 1, Period: budget.Day}
		if err := sp.Check(); err != nil {
			t.Fatal(err)
		}
		cfg.Budgets = append(cfg.Budgets, sp)
	}
	base := serveStack(t, cfg, assemble.Env{})
	// One request on each key spends its budget of one token.
	for _, k := range keys {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"Hi."}]}`))
		req.Header.Set("X-Api-Key", k)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the request that spends %s's budget: %d", k, resp.StatusCode)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var rs [3]reaction
	var fs [3]*front
	for i := range fs {
		fb, f := newFront(t, base)
		fs[i] = f
		wg.Go(func() {
			switch i {
			case 0:
				rs[i] = claudeReaction(ctx, bin, fb, &refusing{})
			case 1:
				rs[i] = typeScriptReaction(ctx, fb, &refusing{})
			case 2:
				rs[i] = goReaction(ctx, fb, &refusing{})
			}
		})
	}
	wg.Wait()
	for i, who := range []string{"Claude Code", "the TypeScript SDK", "the Go SDK"} {
		r := rs[i]
		r.setTries(fs[i].Tries())
		t.Logf("%s: %s; statuses %v", who, r, statuses(r.tries))
		if r.ok || len(r.tries) != 1 || r.tries[0].status != http.StatusPaymentRequired {
			t.Errorf("%s: %d tries (statuses %v), finished %v; want one try, answered 402, and no success", who, len(r.tries), statuses(r.tries), r.ok)
		}
		if !strings.Contains(r.outcome, "402") {
			t.Errorf("%s ended with %q; want the 402", who, r.outcome)
		}
	}
	if !strings.Contains(rs[0].outcome, "is spent") {
		t.Errorf("Claude Code showed %q; want the budget's message (\"... is spent ...\")", rs[0].outcome)
	}
}
