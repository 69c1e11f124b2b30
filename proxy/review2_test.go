package proxy

// A hostile review of the direct relay (WriteNow, writeDirect) and the
// rewritten sse.Copy: clients and upstreams that misbehave.

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sse"
)

// bigEvent is one content_block_delta of n bytes in all, blank line
// included.
func bigEvent(n int) []byte {
	head := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\""
	tail := "\"}}\n\n"
	return []byte(head + strings.Repeat("x", n-len(head)-len(tail)) + tail)
}

// An event past sse.MaxEventSize is refused however the reads that bring it
// fall: the bound is on the event, not on what one read left over. A
// source that fills each read (a fast upstream, a large socket buffer)
// brings the end of a 9 MB event in the same read that crosses 8 MB.
func TestCopyEventsRefusesAnEventPastTheBoundWhateverTheReads(t *testing.T) {
	for _, size := range []int{sse.MaxEventSize + 1, sse.MaxEventSize + 100, 9 << 20} {
		in := append(append([]byte(sseEvents[0]), bigEvent(size)...), sseEvents[len(sseEvents)-1]...)
		var relayed int
		err := sse.Copy(func(ev []byte, more bool) error {
			relayed = max(relayed, len(ev))
			return nil
		}, bytes.NewReader(in), func([]byte) {})
		if err != sse.ErrEventTooLarge {
			t.Errorf("a %d-byte event (bound %d): sse.Copy = %v, largest event relayed %d bytes; want sse.ErrEventTooLarge", size, sse.MaxEventSize, err, relayed)
		}
	}
	// The bound itself is allowed.
	in := append(append([]byte(sseEvents[0]), bigEvent(sse.MaxEventSize)...), sseEvents[len(sseEvents)-1]...)
	if err := sse.Copy(func([]byte, bool) error { return nil }, bytes.NewReader(in), func([]byte) {}); err != nil {
		t.Errorf("an event of exactly sse.MaxEventSize: %v", err)
	}
}

// Over loopback: an upstream that sends a 9 MB event in one write gets
// the client the in-band error, not the event.
func TestStreamWithA9MBEventEndsWithTheInBandError(t *testing.T) {
	ev := bigEvent(9 << 20)
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseEvents[0])
		w.Write(ev)
		io.WriteString(w, sseEvents[len(sseEvents)-1])
	})
	_, px := startProxy(t, testConfig(t, up.URL, false, func(c *config.Config) { c.StreamIdleTimeout = 20 * time.Second }))
	for i := range 3 {
		r := post(t, px.URL, "/v1/messages", streamRequestJSON)
		body := readAll(t, r.Body)
		if !strings.Contains(body, "larger than 8 MB") || len(body) > sse.MaxEventSize {
			t.Fatalf("try %d: %d bytes relayed, in-band error present: %v; want the error and not the event", i, len(body), strings.Contains(body, "larger than 8 MB"))
		}
	}
}

// manyDeltas is a whole stream of n deltas of varied sizes (some past a
// socket's buffer), as one string.
func manyDeltas(n int) string {
	var b strings.Builder
	b.WriteString(sseEvents[0] + sseEvents[1])
	for i := range n {
		text := strings.Repeat(string(rune('a'+i%26)), 1+(i*7919)%(12<<10))
		b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n")
	}
	for _, ev := range sseEvents[5:] {
		b.WriteString(ev)
	}
	return b.String()
}

// sendFlushed writes s to w in pieces of the given sizes in turn, each
// flushed.
func sendFlushed(w http.ResponseWriter, s string, sizes ...int) {
	for i := 0; len(s) > 0; i++ {
		n := min(len(s), sizes[i%len(sizes)])
		io.WriteString(w, s[:n])
		w.(http.Flusher).Flush()
		s = s[n:]
	}
}

// A 7 MB event (under the bound) reaches a client whole, the socket
// taking a part of it at once and owing the rest, and the same
// connection then serves a plain request and another stream.
func TestA7MBEventThenMoreOnTheSameConnection(t *testing.T) {
	ev := bigEvent(7 << 20)
	want := sseEvents[0] + string(ev) + sseEvents[len(sseEvents)-1]
	up := startUpstream(t, streamOrMessage(func(w http.ResponseWriter) { io.WriteString(w, want) }))
	_, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) { c.StreamIdleTimeout = 20 * time.Second }))
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var conns []string
	for i, body := range []string{streamRequestJSON, requestJSON, streamRequestJSON} {
		req, _ := http.NewRequest(http.MethodPost, px.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", "sk-test")
		req.Header.Set("Content-Type", "application/json")
		var local string
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) { local = ci.Conn.LocalAddr().String() }}))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if i == 0 {
			time.Sleep(300 * time.Millisecond) // reading nothing for a while: the socket fills, the rest owed
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || (i != 1 && string(got) != want) || (i == 1 && string(got) != messageJSON) {
			t.Fatalf("request %d: status %d, %d bytes (want %d), %v", i, resp.StatusCode, len(got), len(want), err)
		}
		conns = append(conns, local)
	}
	if conns[0] != conns[1] || conns[1] != conns[2] {
		t.Errorf("connections %v; want one, kept alive", conns)
	}
}

// An upstream that sends nothing but pings after its first event, with
// \r\n line endings and each ping split in two writes, is ended by the
// watchdog after STREAM_IDLE_TIMEOUT_S with the in-band timeout_error,
// which the client gets after every byte before it.
func TestPingsOnlyWithCRLFAreCutByTheWatchdog(t *testing.T) {
	start := strings.ReplaceAll(sseEvents[0], "\n", "\r\n")
	ping := "event: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n"
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, start)
		w.(http.Flusher).Flush()
		for r.Context().Err() == nil {
			time.Sleep(50 * time.Millisecond)
			io.WriteString(w, ping[:13])
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
			io.WriteString(w, ping[13:])
			w.(http.Flusher).Flush()
		}
	})
	p, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) { c.StreamIdleTimeout = time.Second }))
	began := time.Now()
	r := post(t, px.URL, "/v1/messages", streamRequestJSON)
	body := readAll(t, r.Body)
	took := time.Since(began)
	last := body[strings.LastIndex(body, "\r\n\r\n")+4:] // sluice's own event follows the upstream's last
	if !strings.HasPrefix(body, start) || lastEventError([]byte(last)) != "timeout_error" || took > 3*time.Second {
		t.Fatalf("after %v: last event %q, starts with the upstream's first event: %v", took, last, strings.HasPrefix(body, start))
	}
	eventually(t, "the slot back", func() bool { return p.GateStats().InFlight == 0 })
}

// streamOrMessage is an upstream that answers a stream with want, written
// by send, and any other request with messageJSON.
func streamOrMessage(send func(w http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			writeMessage(w)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		send(w)
	}
}
