package proxy

// Attacks by a hostile client or a failing upstream, second round (see
// hostile_test.go for the first). Each test failed before its fix.

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// resetAfter answers a stream's first events and then resets the
// connection (RST), as a crashed upstream or a middlebox does.
func resetAfter(t *testing.T, events int) *httptest.Server {
	t.Helper()
	return startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, ev := range sseEvents[:events] {
			w.Write([]byte(ev))
		}
		w.(http.Flusher).Flush()
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	})
}

// A stream the upstream broke off is ended with an in-band api_error
// event. Its message quoted the read error, which names the upstream's
// address ("read tcp 10.0.0.5:41234->10.0.0.9:443: read: connection
// reset by peer"): what mapError keeps out of every other answer, since
// it may name a private host, reached the client.
func TestBrokenStreamDoesNotTellTheUpstreamAddress(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		up := resetAfter(t, 3)
		_, px := startProxy(t, testConfig(t, up.URL, windowed))
		resp := post(t, px.URL, "/v1/messages", streamRequestJSON)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		var errEvent string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "data:") && strings.Contains(line, `"type":"error"`) {
				errEvent = line
			}
		}
		if errEvent == "" {
			t.Fatal("no in-band error event after the upstream broke the stream")
		}
		host, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
		if strings.Contains(errEvent, port) || strings.Contains(errEvent, host) || strings.Contains(errEvent, "tcp") {
			t.Errorf("the in-band error names the upstream's address %s:%s: %s", host, port, errEvent)
		}
		if !strings.Contains(errEvent, `"api_error"`) {
			t.Errorf("in-band error %s; want an api_error", errEvent)
		}
	})
}
