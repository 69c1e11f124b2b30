package proxy

// The errors Go's HTTP server writes itself, before any handler,
// rewritten Anthropic-shaped; nothing else rewritten.

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Go's server answers an Expect header other than 100-continue by
// itself, before any handler, with 417 and an empty body: the one answer
// of Go's own that the shaping of its plain-text errors missed, since it
// is written as a handler's answer is (a Date, no body).
func TestExpectationFailedIsAnthropicShaped(t *testing.T) {
	up := startUpstream(t, apiHandler)
	_, px := startProxy(t, testConfig(t, up.URL, true))
	conn := rawRequest(t, px.Listener.Addr().String(), "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nExpect: 200-ok\r\nContent-Length: 2", "{}")
	resp, body := readAnswer(t, conn, bufio.NewReader(conn))
	wantErrorAnswer(t, resp, body, http.StatusExpectationFailed, "invalid_request_error", "100-continue")
	// An upstream's own 417, relayed, is left as it came.
	up417 := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusExpectationFailed) })
	_, px2 := startProxy(t, testConfig(t, up417.URL, true))
	r2, err := http.Get(px2.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	if b := readAll(t, r2.Body); r2.StatusCode != http.StatusExpectationFailed || b != "" {
		t.Errorf("the upstream's 417: %d %q; want it relayed as it came", r2.StatusCode, b)
	}
}

// The errors Go's HTTP server writes itself, before any handler, come out
// Anthropic-shaped with their status.
func TestGoServerErrorsAreAnthropicShaped(t *testing.T) {
	up := startUpstream(t, apiHandler)
	_, px := startProxyWith(t, testConfig(t, up.URL, true), Options{})
	ln := px.Listener
	for _, tc := range []struct {
		name, head string
		status     int
	}{
		{"bad framing", "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Length: 1\r\nContent-Length: 2", 400},
		{"no Host", "GET /v1/models HTTP/1.1", 400},
		{"headers too large", "GET /v1/models HTTP/1.1\r\nHost: sluice\r\nX-Big: " + strings.Repeat("a", 1<<20+4096), 431},
		{"unsupported transfer encoding", "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nTransfer-Encoding: gzip", 501},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := rawRequest(t, ln.Addr().String(), tc.head, "")
			resp, body := readAnswer(t, conn, bufio.NewReader(conn))
			resp.Body = io.NopCloser(bytes.NewReader(body))
			errType := "invalid_request_error"
			if tc.status == 501 {
				errType = "api_error"
			}
			wantError(t, resp, tc.status, errType, "well-formed")
		})
	}
	// A request the server can read is untouched, and so is parking.
	if r := post(t, "http://"+ln.Addr().String(), "/v1/messages", requestJSON); r.StatusCode != 200 {
		t.Fatalf("a good request through the shaping: status %d", r.StatusCode)
	}
	waitForServerLinger()
}

// waitForServerLinger waits for Go's server to let go of connections it
// closes after refusing a request whose body it did not read: it lingers
// 500 ms on each, so that the client can read the answer before the
// close, and the leak check must not count those goroutines.
func waitForServerLinger() {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		if !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("closeWriteAndWait")) || time.Now().After(deadline) {
			return
		}
	}
}

// Only Go's own error answers are rewritten: an answer that merely carries
// the same headers, in its body or in its header block, passes untouched.
func TestShapingLeavesOtherAnswersAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write string
		shape bool
	}{
		{"Go's own 400", "HTTP/1.1 400 Bad Request" + goServerErrorHeaders + "400 Bad Request", true},
		{"Go's own 431", "HTTP/1.1 431 Request Header Fields Too Large" + goServerErrorHeaders + "431 Request Header Fields Too Large", true},
		{"the headers in a body", "HTTP/1.1 200 OK\r\nDate: x\r\nContent-Length: 80\r\n\r\nline one" + goServerErrorHeaders + "line two", false},
		{"a handler's answer with those headers", "HTTP/1.1 200 OK\r\nDate: Mon\r\nContent-Length: 3\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nhi\n", false},
		{"a long body", "HTTP/1.1 400 Bad Request" + goServerErrorHeaders + strings.Repeat("x", 600), false},
		{"a body of two lines", "HTTP/1.1 400 Bad Request" + goServerErrorHeaders + "a\nb", false},
	} {
		if got := isGoServerError([]byte(tc.write)); got != tc.shape {
			t.Errorf("%s: rewritten = %v; want %v", tc.name, got, tc.shape)
		}
	}
}
