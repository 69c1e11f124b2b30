package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// messageJSON is an upstream reply with deliberately odd spacing, so that a
// relay that re-encodes instead of copying bytes is caught.
const messageJSON = `{"id":"msg_01XYZ","type":"message","role":"assistant","model":"claude-sonnet-4-5",` +
	`"content":[{"type":"text","text":"Hello  from upstream"}],"stop_reason":"end_turn","stop_sequence":null,` +
	`"usage":{"input_tokens":12,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":4}}` + "\n"

// sseEvents is a complete upstream stream, one entry per event.
var sseEvents = []string{
	"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01S\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n",
	"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
	"event: ping\ndata: {\"type\": \"ping\"}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" world\"}}\n\n",
	"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\n\n",
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
}

const requestJSON = `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`
const streamRequestJSON = `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

// writeMessage answers like the API does for a non-streaming call.
func writeMessage(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_upstream_1")
	w.Header().Set("Anthropic-Organization-Id", "org-1")
	w.Write([]byte(messageJSON))
}

// writeStream answers like the API does for a streaming call.
func writeStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Request-Id", "req_upstream_s")
	for _, ev := range sseEvents {
		io.WriteString(w, ev)
		w.(http.Flusher).Flush()
	}
}

// apiHandler imitates the Messages API: JSON or SSE by the request's stream
// flag, and plain answers for other paths.
func apiHandler(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.URL.Path == "/v1/messages" && bytes.Contains(body, []byte(`"stream":true`)) {
		writeStream(w)
		return
	}
	writeMessage(w)
}

// testConfig is the default configuration pointed at upstream, windowed or
// plain, with edits applied.
func testConfig(t *testing.T, upstream string, windowed bool, edit ...func(*config.Config)) config.Config {
	t.Helper()
	cfg := config.Default()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	cfg.UpstreamURL = u
	cfg.Enabled = windowed
	cfg.MaxWait = time.Millisecond
	// The suite's timings count the fixed window (BATCH_IDLE_RELEASE=0);
	// the tests of idle release turn it back on.
	cfg.IdleRelease = false
	for _, e := range edit {
		e(&cfg)
	}
	return cfg
}

// startProxy serves a proxy for cfg on loopback, as sluice serve does
// (proxy.Server), with every windowed request parked.
func startProxy(t *testing.T, cfg config.Config) (*Proxy, *testServer) {
	t.Helper()
	return startProxyWith(t, cfg, Options{})
}

// testServer is where a test's proxy listens.
type testServer struct {
	URL      string
	Listener net.Listener
}

// startProxyWith is startProxy with options of the test's own.
func startProxyWith(t *testing.T, cfg config.Config, opt Options) (*Proxy, *testServer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PublicURL == nil {
		cfg.PublicURL = &url.URL{Scheme: "http", Host: ln.Addr().String()} // as sluice serve does for its listener
	}
	if opt.Logger == nil {
		opt.Logger = quietLog
	}
	if opt.ParkWhenQueued == 0 {
		opt.ParkWhenQueued = -1 // every windowed request takes the parked path
	}
	p, err := newProxy(t, cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	stop := (&Server{Proxy: p}).Start(ln)
	t.Cleanup(func() { stop() })
	return p, &testServer{URL: "http://" + ln.Addr().String(), Listener: ln}
}

// startUpstream serves h on a loopback httptest server.
func startUpstream(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// post sends body to the proxy's path with the v1 SDK's headers.
func post(t *testing.T, base, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// bothModes runs f once on the plain path and once windowed.
func bothModes(t *testing.T, f func(t *testing.T, windowed bool)) {
	for _, windowed := range []bool{false, true} {
		name := "plain"
		if windowed {
			name = "windowed"
		}
		t.Run(name, func(t *testing.T) { f(t, windowed) })
	}
}

// quietLog keeps access lines out of the test output; the tests of the
// access log set their own logger.
var quietLog = slog.New(slog.DiscardHandler)

// newProxy builds a proxy for cfg as sluice serve does: of the parts
// assemble.Build makes of cfg, but for those opt gives (a test's part of
// another kind stands in for the one it replaces).
func newProxy(t testing.TB, cfg config.Config, opt Options) (*Proxy, error) {
	t.Helper()
	built, err := assemble.Build(cfg, assemble.Env{Log: opt.Logger})
	if err != nil {
		return nil, err
	}
	given := opt.Parts
	opt.Parts = *built
	if given.Gate != nil {
		opt.Parts.Gate = given.Gate
	}
	if given.Admission != nil {
		opt.Parts.Admission = given.Admission
	}
	if given.Releaser != nil {
		opt.Parts.Releaser, opt.Parts.Cache = given.Releaser, nil
	}
	return New(cfg, opt)
}
