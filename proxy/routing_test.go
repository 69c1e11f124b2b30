package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bulk"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/request"
)

const (
	routeKeyA = "sk-ant-route-A-0123456789-SECRET"
	routeKeyB = "sk-ant-route-B-0123456789-SECRET"
)

// keyedUpstream is an upstream that records the keys its calls carried
// and answers each with status (200: the API's answer).
type keyedUpstream struct {
	URL    string
	status atomic.Int32
	calls  atomic.Int32
	mu     sync.Mutex
	keys   []string
	auth   []string
}

func startKeyed(t *testing.T, status int) *keyedUpstream {
	u := &keyedUpstream{}
	u.status.Store(int32(status))
	srv := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		u.calls.Add(1)
		u.mu.Lock()
		u.keys = append(u.keys, r.Header.Get("X-Api-Key"))
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		if s := int(u.status.Load()); s != 200 {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(s)
			io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			return
		}
		apiHandler(w, r)
	})
	u.URL = srv.URL
	return u
}

func (u *keyedUpstream) seen() ([]string, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.keys...), append([]string(nil), u.auth...)
}

// routedConfig declares backends a (on upstream a, key A) and b (on b,
// key B), in that order.
func routedConfig(t *testing.T, a, b *keyedUpstream, windowed bool) config.Config {
	t.Helper()
	t.Setenv("SLUICE_TEST_ROUTE_A", routeKeyA)
	t.Setenv("SLUICE_TEST_ROUTE_B", routeKeyB)
	ua, _ := url.Parse(a.URL)
	ub, _ := url.Parse(b.URL)
	return testConfig(t, a.URL, windowed, func(c *config.Config) {
		c.Backends = []config.Backend{
			{Name: "a", Kind: "anthropic", URL: ua, Keys: []string{"env:SLUICE_TEST_ROUTE_A"}, MaxConcurrency: 4},
			{Name: "b", Kind: "anthropic", URL: ub, Keys: []string{"env:SLUICE_TEST_ROUTE_B"}, MaxConcurrency: 4},
		}
	})
}

// accessLinesInOrder are the access lines a test's logger wrote, in order.
func accessLinesInOrder(t *testing.T, logs *bytes.Buffer) []map[string]any {
	t.Helper()
	logMu.Lock()
	defer logMu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "request" {
			out = append(out, m)
		}
	}
	return out
}

// TestRoutingPutsTheKeyOn: with backends, each call carries its key's
// credential and nothing of the client's, on both paths and on relayed
// calls.
func TestRoutingPutsTheKeyOn(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		a, b := startKeyed(t, 200), startKeyed(t, 200)
		_, srv := startProxy(t, routedConfig(t, a, b, windowed))
		for range 3 {
			resp := post(t, srv.URL, "/v1/messages", requestJSON)
			if body := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
		}
		resp := post(t, srv.URL, "/v1/messages/count_tokens", requestJSON)
		readAll(t, resp.Body)
		keys, auth := a.seen()
		if len(keys) != 4 {
			t.Fatalf("upstream a took %d calls, b %d; want a (the first, least loaded) to take all 4", len(keys), b.calls.Load())
		}
		for i := range keys {
			if keys[i] != routeKeyA || auth[i] != "" {
				t.Errorf("call %d carried x-api-key %q, authorization %q; want key A alone", i, keys[i], auth[i])
			}
		}
	})
}

// TestFailoverBeforeTheClientSeesAnError: a backend that answers 529 is
// left for the next, within the request, on both paths; the access line
// names the key that served it and the failover; the failed key is then
// skipped without a try.
func TestFailoverBeforeTheClientSeesAnError(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		a, b := startKeyed(t, 529), startKeyed(t, 200)
		logs := &bytes.Buffer{}
		_, srv := startProxyWith(t, routedConfig(t, a, b, windowed), Options{Logger: slog.New(slog.NewJSONHandler(lockedWriter{w: logs}, nil))})
		var ids []string
		for _, stream := range []bool{false, true} {
			body := requestJSON
			if stream {
				body = streamRequestJSON
			}
			resp := post(t, srv.URL, "/v1/messages", body)
			if got := readAll(t, resp.Body); resp.StatusCode != 200 || strings.Contains(got, "overloaded") {
				t.Fatalf("stream=%v: status %d, %s; want b's answer", stream, resp.StatusCode, got)
			}
			ids = append(ids, resp.Header.Get(sluiceIDHeader))
			// In order: the second is routed once the first is logged.
			waitLogged(t, func() string { logMu.Lock(); defer logMu.Unlock(); return logs.String() }, ids...)
		}
		if n := a.calls.Load(); n != 1 {
			t.Errorf("a was called %d times; want once, then skipped while unhealthy", n)
		}
		lines := accessLinesInOrder(t, logs)
		if len(lines) != 2 {
			t.Fatalf("%d access lines; want 2", len(lines))
		}
		if lines[0]["backend"] != "b/1" || lines[0]["failovers"] != 1.0 {
			t.Errorf("first access line: backend %v, failovers %v; want b/1 after 1 failover", lines[0]["backend"], lines[0]["failovers"])
		}
		if lines[1]["backend"] != "b/1" || lines[1]["failovers"] != 0.0 {
			t.Errorf("second access line: backend %v, failovers %v; want b/1 at once", lines[1]["backend"], lines[1]["failovers"])
		}
		if strings.Contains(logs.String(), "route-A") || strings.Contains(logs.String(), "route-B") {
			t.Error("a backend key is in the log")
		}
	})
}

// TestAllBackendsFailingGivesTheUpstreamsAnswer: with every backend at
// 529 the client gets the upstream's own 529, not a hang or a 5xx of
// sluice's.
func TestAllBackendsFailingGivesTheUpstreamsAnswer(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		a, b := startKeyed(t, 529), startKeyed(t, 529)
		_, srv := startProxy(t, routedConfig(t, a, b, windowed))
		resp := post(t, srv.URL, "/v1/messages", requestJSON)
		got := readAll(t, resp.Body)
		if resp.StatusCode != 529 || errorType(t, got) != "overloaded_error" {
			t.Fatalf("status %d, %s; want the upstream's 529", resp.StatusCode, got)
		}
		if a.calls.Load() == 0 || b.calls.Load() == 0 {
			t.Errorf("calls a %d, b %d; want both tried", a.calls.Load(), b.calls.Load())
		}
		if strings.Contains(got, "SECRET") {
			t.Error("a key is in the error")
		}
	})
}

// TestInboundKeyLimitedToABackend: a sluice key whose keys-file entry
// names backend b goes to b only; one naming no backend of this sluice is
// refused with a 403 that says so.
func TestInboundKeyLimitedToABackend(t *testing.T) {
	a, b := startKeyed(t, 200), startKeyed(t, 200)
	keys := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, keys, keyEntry("bonly", `"backends":["b"]`), keyEntry("lost", `"backends":["gone"]`))
	in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
	if err != nil {
		t.Fatal(err)
	}
	_, srv := startProxyWith(t, routedConfig(t, a, b, true), Options{Inbound: in})
	send := func(name string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(requestJSON))
		req.Header.Set("X-Api-Key", sluiceKey(name))
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for range 2 {
		if resp := send("bonly"); resp.StatusCode != 200 {
			t.Fatalf("bonly: status %d", resp.StatusCode)
		}
	}
	if a.calls.Load() != 0 || b.calls.Load() != 2 {
		t.Errorf("calls a %d, b %d; want b's 2 alone", a.calls.Load(), b.calls.Load())
	}
	keysSeen, _ := b.seen()
	for _, k := range keysSeen {
		if k != routeKeyB {
			t.Errorf("b saw key %q; want key B (not the held key nor the sluice key)", k)
		}
	}
	resp := send("lost")
	got := readAll(t, resp.Body)
	if resp.StatusCode != 403 || errorType(t, got) != "permission_error" || !strings.Contains(got, "gone") {
		t.Errorf("lost: status %d, %s; want a 403 naming its backends", resp.StatusCode, got)
	}
}

// capturedClaudeCode is a captured Claude Code request in testdata/clients:
// its headers and its body, as Claude Code sent them.
func capturedClaudeCode(t *testing.T, name string) (http.Header, []byte) {
	t.Helper()
	var rec struct {
		Header http.Header `json:"header"`
	}
	b, err := os.ReadFile(filepath.Join("..", "testdata", "clients", name+".request.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join("..", "testdata", "clients", name+".body"))
	if err != nil {
		t.Fatal(err)
	}
	return rec.Header, body
}

// TestClaudeCodeConversationStaysOnItsKey: a captured Claude Code
// conversation's next turn goes to the key its first turn went to (its
// session and its cached prefix are there), though the other key is
// emptier; a request of nobody's goes to the emptier key.
func TestClaudeCodeConversationStaysOnItsKey(t *testing.T) {
	release := make(chan struct{})
	var aCalls, bCalls atomic.Int32
	a := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if aCalls.Add(1) > 1 {
			<-release // the noise that lands on a stays in flight
		}
		apiHandler(w, r)
	})
	b := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { bCalls.Add(1); apiHandler(w, r) })
	t.Cleanup(func() { close(release) })
	ka, kb := &keyedUpstream{URL: a.URL}, &keyedUpstream{URL: b.URL}
	_, srv := startProxy(t, routedConfig(t, ka, kb, false))
	send := func(h http.Header, body []byte, key string) <-chan int {
		done := make(chan int, 1)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", bytes.NewReader(body))
		for k, v := range h {
			if !strings.EqualFold(k, "content-length") && !strings.EqualFold(k, "accept-encoding") {
				req.Header[http.CanonicalHeaderKey(k)] = v
			}
		}
		req.Header.Set("X-Api-Key", key)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		return done
	}
	h1, first := capturedClaudeCode(t, "claude-code-first")
	if code := <-send(h1, first, "sk-claude"); code != 200 || aCalls.Load() != 1 {
		t.Fatalf("the first turn: status %d, calls on a %d; want 200 on a (both keys empty, a first)", code, aCalls.Load())
	}
	// Noise from other clients: what lands on a stays in flight there,
	// what lands on b is answered, until a has two pending and b none.
	for i := 0; aCalls.Load() < 3; i++ {
		send(http.Header{"Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"}}, []byte(requestJSON), "sk-noise-"+strconv.Itoa(i))
		for deadline := time.Now().Add(5 * time.Second); aCalls.Load()+bCalls.Load() < int32(i+2); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the noise never reached an upstream")
			}
		}
	}
	before := aCalls.Load()
	h2, next := capturedClaudeCode(t, "claude-code-tool-result")
	if h2.Get("X-Claude-Code-Session-Id") != h1.Get("X-Claude-Code-Session-Id") {
		t.Fatal("the fixtures are not one conversation: re-captured?")
	}
	next2 := send(h2, next, "sk-claude")
	for deadline := time.Now().Add(5 * time.Second); aCalls.Load() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the conversation's next turn did not go to a, its key (calls a %d, b %d)", aCalls.Load(), bCalls.Load())
		}
	}
	bNow := bCalls.Load()
	if code := <-send(http.Header{"Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"}}, []byte(requestJSON), "sk-stranger"); code != 200 || bCalls.Load() != bNow+1 {
		t.Errorf("a stranger's request: status %d, b's calls %d → %d; want it on b, the emptier key", code, bNow, bCalls.Load())
	}
	_ = next2
}

// TestInboundKeyLimitedKeepsOffTheBulkKey: a sluice key limited to
// backend b cannot reach the bulk key of backend a through the batches
// endpoint (listing, reading results, submitting): it is refused with the
// 403 that names its backends, and a is never called.
func TestInboundKeyLimitedKeepsOffTheBulkKey(t *testing.T) {
	a, b := startKeyed(t, 200), startKeyed(t, 200)
	keys := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, keys, keyEntry("bonly", `"backends":["b"]`))
	in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
	if err != nil {
		t.Fatal(err)
	}
	ua, _ := url.Parse(a.URL)
	svc, err := bulk.New(context.Background(), bulk.Config{Upstream: ua, DataDir: t.TempDir(), MaxWait: 50 * time.Millisecond, PollInterval: time.Hour, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Close)
	_, srv := startProxyWith(t, routedConfig(t, a, b, true), Options{Inbound: in, Bulk: svc})
	status, got := send(t, "POST", srv.URL+"/v1/bulk/messages", msgBody(), "x-api-key", sluiceKey("bonly"))
	if status != 403 || errorType(t, got) != "permission_error" || !strings.Contains(got, "backend a") {
		t.Errorf("POST /v1/bulk/messages: status %d, %s; want a 403 naming the bulk backend", status, got)
	}
	for _, path := range []string{"/v1/messages/batches", "/v1/messages/batches/msgbatch_x/results"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("X-Api-Key", sluiceKey("bonly"))
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, resp.Body)
		if resp.StatusCode != 403 || errorType(t, got) != "permission_error" {
			t.Errorf("GET %s: status %d, %s; want a 403", path, resp.StatusCode, got)
		}
	}
	if n := a.calls.Load(); n != 0 {
		t.Errorf("a (the bulk key's backend) was called %d times by a key limited to b", n)
	}
}

// TestSessionIsTheTenants: a session id (Claude Code's header, or
// metadata.user_id) names a session of its tenant only: another tenant
// sending the same id, forged or by chance, neither steers its requests
// by that session's key nor moves the session to its own.
func TestSessionIsTheTenants(t *testing.T) {
	h := http.Header{sessionHeader: {"3f1c-session"}}
	for _, withHeader := range []bool{true, false} {
		hh := http.Header{}
		if withHeader {
			hh = h
		}
		a := sessionOf(hh, &request.Descriptor{Tenant: "alice", UserID: "user-1"})
		b := sessionOf(hh, &request.Descriptor{Tenant: "mallory", UserID: "user-1"})
		if a == b {
			t.Errorf("header %v: alice's and mallory's sessions are both %q; want them apart", withHeader, a)
		}
	}
}

// TestPlainPathNoFailoverOnceSent: on the plain path (one attempt, no
// retries), a call whose connection broke after its body was sent may
// have reached the upstream, which may be running it: it is not sent
// again to another key (twice the tokens, for a request the client may
// itself retry), but answered with the 502 that says it may have reached
// the upstream. A refused connection (nothing sent) still fails over.
func TestPlainPathNoFailoverOnceSent(t *testing.T) {
	var cut atomic.Int32
	srv := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		cut.Add(1)
		io.Copy(io.Discard, r.Body) // the whole request is in
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	a, b := &keyedUpstream{URL: srv.URL}, startKeyed(t, 200)
	_, px := startProxy(t, routedConfig(t, a, b, false))
	resp := post(t, px.URL, "/v1/messages", requestJSON)
	got := readAll(t, resp.Body)
	if n := b.calls.Load(); n != 0 {
		t.Errorf("b was called %d times after a took the whole request and cut the connection; want 0", n)
	}
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(got, "may have reached") {
		t.Errorf("status %d, %s; want the 502 that says the request may have reached the upstream", resp.StatusCode, got)
	}
	if n := cut.Load(); n != 1 {
		t.Errorf("a was called %d times; want once", n)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := &keyedUpstream{URL: "http://" + l.Addr().String()}
	l.Close()
	_, px = startProxy(t, routedConfig(t, refused, b, false))
	resp = post(t, px.URL, "/v1/messages", requestJSON)
	if got := readAll(t, resp.Body); resp.StatusCode != 200 || b.calls.Load() != 1 {
		t.Errorf("a refused connection: status %d, %s, b called %d times; want b's answer", resp.StatusCode, got, b.calls.Load())
	}
}

// TestPlainPathTimeoutSkipsTheKey: on the plain path, a key whose
// upstream sends no answer within UPSTREAM_TIMEOUT_S has failed (as a
// 529 would have): it is skipped, and the next request goes to the other
// key instead of waiting out the timeout on it again.
func TestPlainPathTimeoutSkipsTheKey(t *testing.T) {
	release := make(chan struct{})
	var hung atomic.Int32
	srv := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		hung.Add(1)
		io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(release) })
	a, b := &keyedUpstream{URL: srv.URL}, startKeyed(t, 200)
	cfg := routedConfig(t, a, b, false)
	cfg.UpstreamTimeout = 200 * time.Millisecond
	_, px := startProxy(t, cfg)
	resp := post(t, px.URL, "/v1/messages", requestJSON)
	if got := readAll(t, resp.Body); resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("first request: status %d, %s; want a's timeout", resp.StatusCode, got)
	}
	resp = post(t, px.URL, "/v1/messages", requestJSON)
	if got := readAll(t, resp.Body); resp.StatusCode != 200 {
		t.Errorf("second request: status %d, %s; want b's answer", resp.StatusCode, got)
	}
	if n := hung.Load(); n != 1 {
		t.Errorf("the hung upstream was called %d times; want once, then skipped", n)
	}
}

// TestRefusedKeyFailsOver: a backend key the upstream refuses (401: it
// was revoked) is left for another before the client sees the 401, and
// skipped after, on both paths.
func TestRefusedKeyFailsOver(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		a, b := startKeyed(t, http.StatusUnauthorized), startKeyed(t, 200)
		_, srv := startProxy(t, routedConfig(t, a, b, windowed))
		for range 2 {
			resp := post(t, srv.URL, "/v1/messages", requestJSON)
			if got := readAll(t, resp.Body); resp.StatusCode != 200 {
				t.Fatalf("status %d, %s; want b's answer", resp.StatusCode, got)
			}
		}
		if a.calls.Load() != 1 || b.calls.Load() != 2 {
			t.Errorf("calls a %d, b %d; want a once (then skipped), b twice", a.calls.Load(), b.calls.Load())
		}
	})
}
