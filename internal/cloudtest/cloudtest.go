// Package cloudtest is what the cloud backends' tests share: the simulator
// on loopback with test credentials, a record of what reached it, a
// transport that adds the simulator's test headers, and a check that a
// secret appears in no text. Only tests import it.
package cloudtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/upstream"
)

// The simulator's test credentials in these tests: made-up values.
const (
	AccessKeyID     = "AKIACLOUDTESTKEY0001"
	SecretAccessKey = "cloudtest-secret-access-key-0001"
	VertexToken     = "cloudtest-vertex-token"
	FoundryAPIKey   = "cloudtest-foundry-api-key"
	FoundryToken    = "cloudtest-foundry-entra-token"
)

// Config is a fast simulator (no latency, no limits) that accepts the
// test credentials above.
func Config() sim.Config {
	return sim.Config{Seed: 5, BedrockAccessKeyID: AccessKeyID, BedrockSecretAccessKey: SecretAccessKey, VertexToken: VertexToken,
		FoundryAPIKey: FoundryAPIKey, FoundryToken: FoundryToken}
}

// Captured is one request as it reached the simulator.
type Captured struct {
	Method string
	Path   string // escaped, as sent
	Query  string // raw, as sent
	Header http.Header
	Body   []byte
}

// Sim is a simulator on a loopback port that records every request.
type Sim struct {
	*sim.Server
	URL string

	mu   sync.Mutex
	reqs []Captured
}

// Start serves a simulator with cfg until the test ends.
func Start(t testing.TB, cfg sim.Config) *Sim {
	t.Helper()
	s := &Sim{Server: sim.New(cfg)}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, Captured{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: b})
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		s.Server.ServeHTTP(w, r)
	}))
	s.URL = ts.URL
	t.Cleanup(func() {
		ts.Close()
		s.Server.Close()
	})
	return s
}

// Requests returns what reached the simulator so far.
func (s *Sim) Requests() []Captured {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Captured(nil), s.reqs...)
}

// Last is the last request that reached the simulator.
func (s *Sim) Last(t testing.TB) Captured {
	t.Helper()
	r := s.Requests()
	if len(r) == 0 {
		t.Fatal("no request reached the simulator")
	}
	return r[len(r)-1]
}

// Headers adds its headers to each request after the client signed it:
// the simulator's x-sim-* test headers, which no signature covers.
type Headers struct {
	Base http.RoundTripper
	Add  http.Header
}

func (h *Headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.Add {
		r.Header[k] = v
	}
	base := h.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// Client is an HTTP client that sends hdr (name, value pairs) with each
// request, on a transport of its own the test closes.
func Client(t testing.TB, hdr ...string) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	add := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		add.Set(hdr[i], hdr[i+1])
	}
	return &http.Client{Transport: &Headers{Base: tr, Add: add}}
}

// Leaks returns the texts that contain secret.
func Leaks(secret string, texts ...string) []string {
	var out []string
	for _, s := range texts {
		if strings.Contains(s, secret) {
			out = append(out, s)
		}
	}
	return out
}

// Body reads and closes resp's body.
func Body(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read the body: %v", err)
	}
	return string(b)
}

// CacheControls lists every cache_control in a JSON body by where it sits
// (system[0], tools[1], messages[0].content[2], …) with its value, as
// compact JSON: what a rewrite of the body must keep.
func CacheControls(t testing.TB, body []byte) map[string]string {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("body %s: %v", body, err)
	}
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "cache_control" {
					b, _ := json.Marshal(e)
					out[path] = string(b)
					continue
				}
				walk(strings.TrimPrefix(path+"."+k, "."), e)
			}
		case []any:
			for i, e := range x {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", v)
	return out
}

// CachedBody is a Messages request for model with the API's most (4)
// cache_control breakpoints: on a tool (with a 1h ttl), on a system block
// and on two message content blocks (one with a 5m ttl).
func CachedBody(model string, stream bool) string {
	long := strings.Repeat("The archive holds the ledgers of every harbour. ", 40)
	return fmt.Sprintf(`{"model":%q,"max_tokens":64,"stream":%t,`+
		`"tools":[{"name":"lookup","description":%q,"input_schema":{"type":"object","properties":{"q":{"type":"string"}}},"cache_control":{"type":"ephemeral","ttl":"1h"}},`+
		`{"name":"file","description":"files a note","input_schema":{"type":"object"}}],`+
		`"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],`+
		`"messages":[{"role":"user","content":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}},{"type":"text","text":"and now?"}]},`+
		`{"role":"assistant","content":"Looking."},{"role":"user","content":[{"type":"text","text":"go on","cache_control":{"type":"ephemeral","ttl":"5m"}}]}]}`,
		model, stream, long, long, long)
}

// WantError checks that resp is the Anthropic error of status and typ, as
// JSON, whose message says each of parts; it returns the body.
func WantError(t testing.TB, resp *http.Response, status int, typ string, parts ...string) string {
	t.Helper()
	body := Body(t, resp)
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if resp.StatusCode != status || json.Unmarshal([]byte(body), &e) != nil || e.Type != "error" || e.Error.Type != typ {
		t.Fatalf("answer %d %s; want %d with an error of type %s", resp.StatusCode, body, status, typ)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q; want application/json", ct)
	}
	for _, p := range parts {
		if !strings.Contains(e.Error.Message, p) {
			t.Errorf("message %q; want it to say %q", e.Error.Message, p)
		}
	}
	return body
}

// Relay serves b as sluice's relay does: each request handed to Do, the
// answer's status, headers and body passed on, a stream flushed as it
// comes; a failure to get an answer is a 502. It lets an official client
// speak the Messages API to a cloud backend in a test.
func Relay(t testing.TB, b upstream.Backend) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := b.Do(r.Context(), r, r.Body, r.ContentLength)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				_ = http.NewResponseController(w).Flush()
			}
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// CheckWithSDK drives the official Go SDK, as a client of sluice would,
// through Relay at backends newBackend makes (hdr: test headers for the
// simulator behind them): a reply, the same reply streamed, a count, a
// rate limit and an overload as the API's errors, an in-band stream error
// and a refused batch. model is a first-party id the backends map.
func CheckWithSDK(t *testing.T, model string, newBackend func(hdr ...string) upstream.Backend) {
	t.Helper()
	ctx := context.Background()
	client := func(hdr ...string) *anthropic.Client {
		c := anthropic.NewClient(option.WithAPIKey("sk-ant-client-key"), option.WithBaseURL(Relay(t, newBackend(hdr...))), option.WithMaxRetries(0))
		return &c
	}
	c := client()
	p := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
	msg, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatalf("Messages.New: %v", err)
	}
	if len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.StopReason != "end_turn" {
		t.Fatalf("reply %+v; want text ending end_turn", msg)
	}
	stream := c.Messages.NewStreaming(ctx, p)
	var acc anthropic.Message
	for stream.Next() {
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatalf("Accumulate: %v", err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	stream.Close()
	if acc.Content[0].Text != msg.Content[0].Text || acc.Usage.OutputTokens != msg.Usage.OutputTokens {
		t.Errorf("streamed %q (%d tokens); want %q (%d)", acc.Content[0].Text, acc.Usage.OutputTokens, msg.Content[0].Text, msg.Usage.OutputTokens)
	}
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: p.Model, Messages: p.Messages})
	if err != nil || n.InputTokens != msg.Usage.InputTokens {
		t.Errorf("CountTokens = %+v, %v; want the reply's %d input tokens", n, err, msg.Usage.InputTokens)
	}

	var apiErr *anthropic.Error
	for _, f := range []struct {
		fault  string
		status int
		typ    string
	}{{"429", 429, "rate_limit_error"}, {"529", 529, "overloaded_error"}} {
		_, err := client("x-sim-fault", f.fault).Messages.New(ctx, p)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != f.status || !strings.Contains(apiErr.RawJSON(), `"type":"`+f.typ+`"`) || apiErr.RequestID == "" {
			t.Errorf("fault %s: %v; want the API's %d %s with a request id", f.fault, err, f.status, f.typ)
		}
	}
	stream = client("x-sim-fault", "midstream-error").Messages.NewStreaming(ctx, p)
	events := 0
	for stream.Next() {
		events++
	}
	stream.Close()
	if err := stream.Err(); err == nil || events == 0 || !strings.Contains(err.Error(), "overloaded_error") {
		t.Errorf("midstream error after %d events: %v; want events, then overloaded_error", events, err)
	}
	_, err = c.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{{CustomID: "a", Params: anthropic.MessageBatchNewParamsRequestParams{Model: p.Model, MaxTokens: p.MaxTokens, Messages: p.Messages}}}})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(err.Error(), "Message Batches are not offered") {
		t.Errorf("a batch: %v; want a 400 that says batches are not offered", err)
	}
}

// Request is a client's request to sluice as the relay hands it to a
// backend: the client's key and API version, and hdr (name, value pairs).
func Request(path, body string, hdr ...string) *http.Request {
	in := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	in.Header.Set("x-api-key", "sk-ant-client-key")
	in.Header.Set("anthropic-version", "2023-06-01")
	in.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		in.Header.Set(hdr[i], hdr[i+1])
	}
	return in
}

// Do hands b a client's request (see Request) and returns its answer.
func Do(t testing.TB, b upstream.Backend, path, body string, hdr ...string) *http.Response {
	t.Helper()
	resp, err := b.Do(context.Background(), Request(path, body, hdr...), strings.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return resp
}

// ErrorCase is a simulator fault (or a body the cloud refuses) and the
// Anthropic error a backend must answer for it, naming cause.
type ErrorCase struct {
	Name, Fault, Body string
	Status            int
	Type, Cause       string
	// AsIs: the cloud answered in the Anthropic shape and the backend
	// passes it on untouched, so the message does not name the backend.
	AsIs bool
}

// CheckErrors runs each case through a backend newBackend makes with the
// fault's test header; every answer must also name the backend (label).
func CheckErrors(t *testing.T, label string, cases []ErrorCase, newBackend func(hdr ...string) upstream.Backend) {
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			var hdr []string
			if c.Fault != "" {
				hdr = []string{"x-sim-fault", c.Fault}
			}
			resp := Do(t, newBackend(hdr...), "/v1/messages", c.Body)
			if resp.Header.Get("Request-Id") == "" {
				t.Errorf("no Request-Id from the cloud's request id")
			}
			names := label
			if c.AsIs {
				names = c.Cause
			}
			WantError(t, resp, c.Status, c.Type, names, c.Cause)
		})
	}
}
