package proxy

import (
	"bufio"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// upstreamSeen records the path and headers of every request that reached
// a test upstream.
type upstreamSeen struct {
	mu    sync.Mutex
	paths []string
	heads []http.Header
}

func (u *upstreamSeen) handler(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.paths = append(u.paths, r.URL.EscapedPath())
	u.heads = append(u.heads, r.Header.Clone())
	u.mu.Unlock()
	apiHandler(w, r)
}

func (u *upstreamSeen) count() int { u.mu.Lock(); defer u.mu.Unlock(); return len(u.paths) }

// Over raw sockets, since Go's client would clean or refuse these request
// lines itself. The upstream URL has a path prefix, as a gateway's has:
// the traversals aim above it.
func TestNoOpenRelayOverRawSockets(t *testing.T) {
	seen := &upstreamSeen{}
	up := startUpstream(t, seen.handler)
	_, px := startProxy(t, testConfig(t, up.URL+"/anthropic", true))
	addr := px.Listener.Addr().String()
	for _, tc := range []struct {
		name, line string
		status     int
		errType    string
		hint       string
	}{
		{"absolute-form for another host", "GET http://example.com/v1/models HTTP/1.1", 400, "invalid_request_error", "not a forward proxy"},
		{"absolute-form https", "POST https://api.example.com/v1/messages HTTP/1.1", 400, "invalid_request_error", "not a forward proxy"},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1", 400, "invalid_request_error", "not a forward proxy"},
		{"CONNECT to sluice itself", "CONNECT " + addr + " HTTP/1.1", 400, "invalid_request_error", "not a forward proxy"},
		{"dot segments", "GET /v1/../../admin HTTP/1.1", 404, "not_found_error", "dot segments"},
		{"encoded dots", "GET /v1/%2e%2e/%2e%2e/admin HTTP/1.1", 404, "not_found_error", "dot segments"},
		{"encoded dots, mixed case", "GET /v1/%2E%2e/%2e%2E/admin HTTP/1.1", 404, "not_found_error", "dot segments"},
		{"dot dot and an encoded slash", "GET /v1/..%2f..%2fadmin HTTP/1.1", 400, "invalid_request_error", "%2f"},
		{"an encoded slash", "GET /v1/models%2f..%2f..%2fadmin HTTP/1.1", 400, "invalid_request_error", "%2f"},
		{"an encoded slash alone", "GET /v1/models/a%2Fb HTTP/1.1", 400, "invalid_request_error", "%2f"},
		{"double-encoded dots", "GET /v1/%252e%252e/%252e%252e/admin HTTP/1.1", 400, "invalid_request_error", "%252e"},
		{"double-encoded slash", "GET /v1/..%252f..%252fadmin HTTP/1.1", 400, "invalid_request_error", "%252e"},
		{"an encoded NUL", "GET /v1/models/a%00b HTTP/1.1", 400, "invalid_request_error", "control"},
		{"a backslash", "GET /v1/..\\..\\admin HTTP/1.1", 400, "invalid_request_error", "backslash"},
		{"an encoded backslash", "GET /v1/..%5c..%5cadmin HTTP/1.1", 400, "invalid_request_error", "backslash"},
	} {
		conn := rawRequest(t, addr, tc.line+"\r\nHost: "+addr+"\r\nX-Api-Key: sk-test", "")
		resp, body := readAnswer(t, conn, bufio.NewReader(conn))
		wantErrorAnswer(t, resp, body, tc.status, tc.errType, tc.hint)
		if t.Failed() {
			t.Fatalf("%s (%s)", tc.name, tc.line)
		}
	}
	if n := seen.count(); n != 0 {
		t.Fatalf("%d refused requests reached the upstream: %v", n, seen.paths)
	}

	// sluice's own address in absolute form is served, as HTTP/1.1 asks a
	// server to accept it; so is an escape no decoding turns into a
	// separator.
	for _, line := range []string{"GET http://" + addr + "/v1/models HTTP/1.1", "GET /v1/models/claude%20x HTTP/1.1"} {
		conn := rawRequest(t, addr, line+"\r\nHost: "+addr+"\r\nX-Api-Key: sk-test", "")
		if resp, body := readAnswer(t, conn, bufio.NewReader(conn)); resp.StatusCode != 200 {
			t.Errorf("%s: %d %s; want it relayed", line, resp.StatusCode, body)
		}
	}
	if got := strings.Join(seen.paths, " "); got != "/anthropic/v1/models /anthropic/v1/models/claude%20x" {
		t.Errorf("the upstream saw %s; want both under its prefix", got)
	}
}

func TestForwardedHeadersAreDroppedUnlessThePeerIsTrusted(t *testing.T) {
	forwarded := map[string]string{
		"Forwarded":          "for=203.0.113.9;host=evil.example",
		"X-Forwarded-For":    "203.0.113.9",
		"X-Forwarded-Host":   "evil.example",
		"X-Forwarded-Proto":  "https",
		"X-Forwarded-Prefix": "/admin",
		"X-Real-Ip":          "203.0.113.9",
	}
	for _, tc := range []struct {
		name    string
		trusted string
		kept    bool
	}{
		{"no trusted proxies", "", false},
		{"another peer trusted", "10.0.0.0/8, 192.0.2.1", false},
		{"loopback trusted", "127.0.0.0/8", true},
		{"the peer's address trusted", "127.0.0.1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bothModes(t, func(t *testing.T, windowed bool) {
				seen := &upstreamSeen{}
				up := startUpstream(t, seen.handler)
				cfg := testConfig(t, up.URL, windowed)
				cfg.TrustedProxies = trustedProxies(t, tc.trusted)
				_, px := startProxy(t, cfg)
				for _, path := range []string{"/v1/messages", "/v1/models"} {
					req, _ := http.NewRequest(http.MethodPost, px.URL+path, strings.NewReader(requestJSON))
					req.Header.Set("X-Api-Key", "sk-test")
					for k, v := range forwarded {
						req.Header.Set(k, v)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
				}
				if seen.count() != 2 {
					t.Fatalf("%d requests reached the upstream; want 2", seen.count())
				}
				for i, h := range seen.heads {
					for k, v := range forwarded {
						if got := h.Get(k); (got == v) != tc.kept || (!tc.kept && got != "") {
							t.Errorf("%s: the upstream saw %s: %q; kept %v, want kept %v", seen.paths[i], k, got, got != "", tc.kept)
						}
					}
				}
			})
		})
	}
}

// trustedProxies is TRUSTED_PROXIES=v as the config reads it.
func trustedProxies(t *testing.T, v string) []netip.Prefix {
	t.Helper()
	c, err := config.Load(nil, func(k string) (string, bool) { return v, k == "TRUSTED_PROXIES" })
	if err != nil {
		t.Fatal(err)
	}
	return c.TrustedProxies
}
