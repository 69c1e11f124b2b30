package proxy

// A relayed stream the upstream breaks off or ends early: the client is
// told, in band, and nothing of the upstream's address leaks.

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

// endsEarly answers a stream's first events and then ends the response
// cleanly (the chunked body's last chunk), with tail, if any, after them:
// an upstream or a gateway that closes a stream on a timeout of its own.
func endsEarly(t *testing.T, events int, tail string) *httptest.Server {
	t.Helper()
	return startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, ev := range sseEvents[:events] {
			w.Write([]byte(ev))
		}
		w.Write([]byte(tail))
	})
}

// A 200 stream that ends, cleanly at the HTTP level, before message_stop
// was relayed as if it were whole: the SDKs then return a partial Message
// (no stop_reason, part of the text) with no error, and the caller cannot
// tell. A trailing half event was written as is, so the client's parser
// read garbage. sluice now drops the half event and ends the stream with
// an in-band api_error, as when the upstream breaks off.
func TestStreamEndingBeforeMessageStopEndsWithAnError(t *testing.T) {
	for _, tc := range []struct{ name, tail string }{
		{"on an event boundary", ""},
		{"mid-event", "event: content_block_delta\ndata: {\"type\":\"content_bl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bothModes(t, func(t *testing.T, windowed bool) {
				up := endsEarly(t, 4, tc.tail)
				_, px := startProxy(t, testConfig(t, up.URL, windowed))
				resp := post(t, px.URL, "/v1/messages", streamRequestJSON)
				got := readAll(t, resp.Body)
				events := strings.Split(strings.TrimSuffix(got, "\n\n"), "\n\n")
				last := events[len(events)-1]
				if !strings.HasPrefix(last, "event: error\n") || !strings.Contains(last, `"api_error"`) {
					t.Errorf("the stream's last event: %q; want an in-band api_error", last)
				}
				if strings.Contains(got+"\n", `{"type":"content_bl`+"\n") {
					t.Errorf("the half event reached the client: %q", got)
				}
				if !strings.HasSuffix(got, "\n\n") {
					t.Errorf("the stream does not end on an event boundary: %q", got)
				}
			})
		})
	}
	// A whole stream is relayed as it came, with nothing added.
	up := endsEarly(t, len(sseEvents), "")
	_, px := startProxy(t, testConfig(t, up.URL, true))
	if got := readAll(t, post(t, px.URL, "/v1/messages", streamRequestJSON).Body); got != strings.Join(sseEvents, "") {
		t.Errorf("a whole stream came out as %q", got)
	}
}
