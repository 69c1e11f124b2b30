package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/apierror"
)

// Outcome is how one request ended, after any retries.
type Outcome struct {
	OK        bool
	Status    int    // HTTP status of the last attempt; 0 if none came
	ErrorType string // Anthropic error.type, "client_timeout", or why it was lost
	Lost      bool   // ended in neither a response nor an Anthropic-shaped error
	Retries   int
	FirstByte time.Time // response headers of the last attempt
	FirstTok  time.Time // first content_block_delta of a stream
	Done      time.Time
	// CacheWrite and CacheRead are the answer's cache_creation_input_tokens
	// and cache_read_input_tokens (a stream's, from message_start).
	CacheWrite, CacheRead int
}

// retryPolicy is the official SDKs' retry rule: up to max retries on 408,
// 409, 429, 5xx, connection errors and timeouts, unless x-should-retry says
// otherwise; wait retry-after-ms / retry-after when given (0 < wait <= 60s),
// else min(0.5s * 2^n, 8s) less up to 25 % jitter.
type retryPolicy struct {
	max    int
	jitter func() float64 // in [0, 1)
}

func (p retryPolicy) shouldRetry(h http.Header, status int) bool {
	switch h.Get("x-should-retry") {
	case "true":
		return true
	case "false":
		return false
	}
	return status == 408 || status == 409 || status == 429 || status >= 500
}

// backoff is how long to wait before retry number n (0-based), given the
// headers of the failed response (nil after a connection error or timeout).
func (p retryPolicy) backoff(n int, h http.Header, now time.Time) time.Duration {
	if h != nil {
		if v := h.Get("retry-after-ms"); v != "" {
			if ms, err := strconv.ParseFloat(v, 64); err == nil {
				if d := time.Duration(ms * float64(time.Millisecond)); d > 0 && d <= time.Minute {
					return d
				}
			}
		}
		if v := h.Get("retry-after"); v != "" {
			var d time.Duration
			if s, err := strconv.ParseFloat(v, 64); err == nil {
				d = time.Duration(s * float64(time.Second))
			} else if t, err := http.ParseTime(v); err == nil {
				d = t.Sub(now)
			}
			if d > 0 && d <= time.Minute {
				return d
			}
		}
	}
	base := math.Min(0.5*math.Pow(2, float64(n)), 8)
	return time.Duration((1 - 0.25*p.jitter()) * base * float64(time.Second))
}

// client sends one request the way an official SDK would.
type client struct {
	http   *http.Client
	base   string
	model  string
	prefix string // the shared system prompt; "" for none
	// sessionPrefix, when positive, is the size of each session's own
	// system prompt (workload prefix_per_session), in place of prefix.
	sessionPrefix int
	tools         []map[string]any // the shared tool definitions; nil for none
	timeout       time.Duration
	policy        retryPolicy
	// onAttempt, if set, is told of each attempt before it is sent, with
	// the value of its x-bench-attempt header.
	onAttempt func(key string)
	// bulk sends each request through the bulk endpoint (mode bulk).
	bulk bool
	// noOutputHint leaves out x-sim-output-tokens, so that the simulator
	// picks each reply's length from its prompt: what it does for a batch
	// item, which carries no headers. Set for every mode of a run with
	// mode bulk, so that the modes do the same work.
	noOutputHint bool
	// claudeCode, when set, builds each request in Claude Code's shape
	// (workload shape claude-code) instead of requestBody's.
	claudeCode *claudeCodeShape
}

func newJitter(seed uint64) func() float64 {
	rng := rand.New(rand.NewPCG(seed, 0xb0ff))
	return rng.Float64
}

// filler is n tokens of prompt text after head (the simulator counts ~4
// characters a token).
func filler(head string, n int) string {
	var b strings.Builder
	b.WriteString(head)
	for b.Len() < n*4 {
		b.WriteString("lorem ipsum dolor sit amet ")
	}
	return b.String()
}

// sharedPrefix is the system prompt of about n tokens that every request
// of a scenario with shared_prefix_tokens carries.
func sharedPrefix(n int) string {
	if n <= 0 {
		return ""
	}
	return filler("You are one of many agents working on the same code base. ", n)
}

// ownPrefix is session's own system prompt of about n tokens
// (workload prefix_per_session).
func ownPrefix(session, n int) string {
	return filler(fmt.Sprintf("You are agent %d, working on a task of your own in this context. ", session), n)
}

// toolTokens is the size of each shared tool definition.
const toolTokens = 400

// sharedTools are n tool definitions of about toolTokens tokens each, the
// same in every request of a scenario with shared_tools.
func sharedTools(n int) []map[string]any {
	var tools []map[string]any
	for i := range n {
		tools = append(tools, map[string]any{
			"name":        fmt.Sprintf("tool_%02d", i),
			"description": filler(fmt.Sprintf("Tool %d of the agent's kit. ", i), toolTokens-40),
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{
				"path": map[string]any{"type": "string", "description": "the file to act on"}}, "required": []string{"path"}},
		})
	}
	return tools
}

// requestBody is a Messages request of about a.PromptTokens input tokens
// of its own, after the shared system prompt prefix if there is one, and,
// for a turn of a session, after the session's earlier turns.
func requestBody(model, prefix string, tools []map[string]any, id int, a Arrival) []byte {
	req := map[string]any{
		"model":      model,
		"max_tokens": max(1024, a.OutputTokens),
		"stream":     a.Stream,
		"messages":   []map[string]any{{"role": "user", "content": filler(fmt.Sprintf("request %d: ", id), a.PromptTokens)}},
	}
	if a.Turns > 1 {
		var msgs []map[string]any
		for k := range a.Turn {
			tokens := a.PromptTokens
			if k < len(a.History) {
				tokens = a.History[k] // as turn k was sent
			}
			msgs = append(msgs,
				map[string]any{"role": "user", "content": filler(fmt.Sprintf("session %d turn %d: ", a.Session, k), tokens)},
				map[string]any{"role": "assistant", "content": fmt.Sprintf("Done with turn %d.", k)})
		}
		last := map[string]any{"type": "text", "text": filler(fmt.Sprintf("session %d turn %d: ", a.Session, a.Turn), a.PromptTokens),
			"cache_control": map[string]string{"type": "ephemeral"}}
		req["messages"] = append(msgs, map[string]any{"role": "user", "content": []map[string]any{last}})
	}
	if tools != nil {
		req["tools"] = tools // before the system prompt in the cached prefix: its breakpoint covers them
	}
	if prefix != "" {
		req["system"] = []map[string]any{{"type": "text", "text": prefix, "cache_control": map[string]string{"type": "ephemeral"}}}
	}
	body, _ := json.Marshal(req)
	return body
}

// do sends request id until it succeeds, fails for good, or runs out of
// retries. ctx ending (the run aborted) ends it as lost.
func (c *client) do(ctx context.Context, id int, a Arrival) Outcome {
	body := []byte(a.Body)
	switch {
	case a.Body != "":
	case c.claudeCode != nil:
		body = c.claudeCode.body(c.model, id, a)
	default:
		prefix := c.prefix
		if c.sessionPrefix > 0 && a.Turns > 1 {
			prefix = ownPrefix(a.Session, c.sessionPrefix)
		}
		body = requestBody(c.model, prefix, c.tools, id, a)
	}
	var out Outcome
	try := c.attempt
	if c.bulk {
		try = c.bulkAttempt
	}
	for attempt := 0; ; attempt++ {
		h, retry := try(ctx, id, attempt, a, body, &out)
		if !retry || attempt >= c.policy.max || ctx.Err() != nil {
			out.Done = time.Now()
			return out
		}
		wait := c.policy.backoff(attempt, h, time.Now())
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			out.Done = time.Now()
			return out
		}
		out.Retries++
	}
}

// attempt makes one try and fills out; it returns the response headers (if
// any) and whether the SDK would retry.
func (c *client) attempt(ctx context.Context, id, attempt int, a Arrival, body []byte, out *Outcome) (http.Header, bool) {
	*out = Outcome{Retries: out.Retries}
	actx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		out.Lost, out.ErrorType = true, "bad_request_build"
		return nil, false
	}
	key := fmt.Sprintf("%d.%d", id, attempt)
	c.setHeaders(req, a, attempt)
	if c.claudeCode != nil && a.Body == "" {
		c.claudeCode.setHeaders(req, id, a)
	}
	if !c.noOutputHint {
		req.Header.Set("X-Sim-Output-Tokens", strconv.Itoa(a.OutputTokens))
	}
	// Like the SDKs, tell the server how long this attempt may take.
	if secs := int(c.timeout.Seconds()); secs > 0 {
		req.Header.Set("X-Stainless-Timeout", strconv.Itoa(secs))
	}
	req.Header.Set("X-Bench-Attempt", key)
	if c.onAttempt != nil {
		c.onAttempt(key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.failTransport(ctx, actx, out, err)
		return nil, true // the SDKs retry connection errors and timeouts
	}
	defer resp.Body.Close()
	out.FirstByte = time.Now()
	out.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			c.failTransport(ctx, actx, out, err)
			return resp.Header, true
		}
		if e, ok := apierror.Decode(b); ok {
			out.ErrorType = e.Error.Type
		} else {
			out.Lost, out.ErrorType = true, fmt.Sprintf("non_anthropic_%d", resp.StatusCode)
		}
		return resp.Header, c.policy.shouldRetry(resp.Header, resp.StatusCode)
	}
	if a.Stream {
		c.readStream(ctx, actx, resp.Body, out)
		return resp.Header, false // the SDKs do not retry a stream that began
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.failTransport(ctx, actx, out, err)
		return resp.Header, true
	}
	var msg struct {
		Type  string     `json:"type"`
		Usage cacheUsage `json:"usage"`
	}
	if json.Unmarshal(b, &msg) != nil || msg.Type != "message" {
		out.Lost, out.ErrorType = true, "malformed_response"
		return resp.Header, false
	}
	out.OK = true
	out.CacheWrite, out.CacheRead = msg.Usage.Write, msg.Usage.Read
	return resp.Header, false
}

func (c *client) failTransport(ctx, actx context.Context, out *Outcome, err error) {
	switch {
	case ctx.Err() != nil:
		out.Lost, out.ErrorType = true, "aborted"
	case errors.Is(actx.Err(), context.DeadlineExceeded):
		out.ErrorType = "client_timeout"
	default:
		out.Lost, out.ErrorType = true, "connection_error"
	}
}

// readStream reads SSE until message_stop or an in-band error event.
func (c *client) readStream(ctx, actx context.Context, r io.Reader, out *Outcome) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[len("event:"):])
			if event == "content_block_delta" && out.FirstTok.IsZero() {
				out.FirstTok = time.Now()
			}
			if event == "message_stop" {
				out.OK = true
				return
			}
		case strings.HasPrefix(line, "data:") && event == "message_start":
			var ev struct {
				Message struct {
					Usage cacheUsage `json:"usage"`
				} `json:"message"`
			}
			if json.Unmarshal([]byte(line[len("data:"):]), &ev) == nil {
				out.CacheWrite, out.CacheRead = ev.Message.Usage.Write, ev.Message.Usage.Read
			}
		case strings.HasPrefix(line, "data:") && event == "error":
			e, ok := apierror.Decode([]byte(strings.TrimSpace(line[len("data:"):])))
			if !ok {
				out.Lost, out.ErrorType = true, "malformed_stream_error"
				return
			}
			out.ErrorType = "stream_" + e.Error.Type
			return
		}
	}
	if err := sc.Err(); err != nil {
		c.failTransport(ctx, actx, out, err)
		return
	}
	out.Lost, out.ErrorType = true, "stream_truncated"
}

// cacheUsage is the cache part of an answer's usage.
type cacheUsage struct {
	Write int `json:"cache_creation_input_tokens"`
	Read  int `json:"cache_read_input_tokens"`
}
