package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// longStream answers a stream of n deltas of 16 KB each, as fast as the
// proxy reads them, then ends it; it stops when its request is cancelled.
func longStream(n int) http.HandlerFunc {
	delta := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" +
		strings.Repeat("x", 16<<10) + "\"}}\n\n"
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			writeMessage(w)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, sseEvents[0]+sseEvents[1])
		for range n {
			if _, err := io.WriteString(w, delta); err != nil || r.Context().Err() != nil {
				return
			}
		}
		for _, ev := range sseEvents[5:] {
			io.WriteString(w, ev)
		}
	}
}

// openStream sends a streaming request on a connection whose receive
// buffer is rcvbuf, and reads the answer's headers.
func openStream(t *testing.T, addr string, rcvbuf int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.(*net.TCPConn).SetReadBuffer(rcvbuf)
	fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\nContent-Length: %d\r\n\r\n%s",
		len(streamRequestJSON), streamRequestJSON)
	br := bufio.NewReaderSize(c, 4<<10)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	return c, br
}

// A stream's client that reads nothing gives its slot back within
// STREAM_CLIENT_STALL_S (times 1.25) of the upstream having to wait on it,
// not after STREAM_IDLE_TIMEOUT_S: each piece of a write used to renew
// its deadline, so the idle clock began only once the kernel stopped
// taking bytes, and 8 such clients held 8 slots for 60 s.
func TestStreamClientThatReadsNothingGivesItsSlotBackSoon(t *testing.T) {
	up := startUpstream(t, longStream(2048)) // 32 MB: past every buffer
	p, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) {
		c.MaxConcurrency = 1
		c.StreamClientStall = time.Second
	}))
	start := time.Now()
	c, _ := openStream(t, px.Listener.Addr().String(), 4<<10)
	// From here on the client reads nothing.
	const bound = 15 * time.Second // STREAM_IDLE_TIMEOUT_S is 60 s
	for deadline := time.Now().Add(bound); p.GateStats().InFlight != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("slot still held %v after a client that reads nothing asked for a long stream", bound)
		}
	}
	t.Logf("slot given back %v after the stream began", time.Since(start).Round(time.Millisecond))
	// Another request gets the slot, and the client's connection is let
	// go (closed: what was sent to it before still drains to it).
	r := post(t, px.URL, "/v1/messages", requestJSON)
	if r.StatusCode != 200 {
		t.Fatalf("the next request: %d", r.StatusCode)
	}
	readAll(t, r.Body)
	r.Body.Close()
	http.DefaultClient.CloseIdleConnections() // the next request's, parked idle after its answer
	eventually(t, "the stalled client's connection let go", func() bool { return p.parker.Parked() == 0 })
	if got := counterValue(t, p, "sluice_stream_client_stalls_total"); got != 1 {
		t.Errorf("sluice_stream_client_stalls_total = %v; want 1", got)
	}
	_ = c
}

// A client that reads slowly, in small pieces, is never cut for it, even
// while the upstream waits on it far longer than STREAM_CLIENT_STALL_S:
// each piece it takes is progress.
func TestSlowStreamReaderIsNotCut(t *testing.T) {
	up := startUpstream(t, longStream(512)) // 8 MB
	p, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) {
		c.StreamClientStall = time.Second
	}))
	c, br := openStream(t, px.Listener.Addr().String(), 64<<10)
	// 8 KB every 50 ms (160 KB/s) for 4 s, 4 × the stall bound, with the
	// upstream waiting on it throughout; then the rest at full speed. (On
	// loopback the client's TCP opens its window, and so acknowledges
	// more, an MSS of 64 KB at a time: 0.4 s apart at this pace.)
	buf := make([]byte, 8<<10)
	for slow := time.Now().Add(4 * time.Second); time.Now().Before(slow); time.Sleep(50 * time.Millisecond) {
		if _, err := io.ReadFull(br, buf); err != nil {
			t.Fatalf("the slow reader was cut: %v", err)
		}
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	rest, err := io.ReadAll(br)
	if !strings.Contains(string(rest), "event: message_stop") {
		t.Fatalf("the slow reader's stream did not end with message_stop (%v); its last bytes: %q", err, rest[max(0, len(rest)-200):])
	}
	if got := counterValue(t, p, "sluice_stream_client_stalls_total"); got != 0 {
		t.Errorf("sluice_stream_client_stalls_total = %v; want 0", got)
	}
}

// counterValue reads a counter of p's as a scrape would.
func counterValue(t *testing.T, p *Proxy, name string) float64 {
	t.Helper()
	mfs, err := p.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
