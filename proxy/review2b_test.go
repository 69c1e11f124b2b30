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

// A client with a tiny receive window that reads 16 bytes at a time, and
// has pipelined a second request behind its stream: every byte of the
// stream arrives in order in valid chunks (net/http's reader parses
// them), and the next answer follows it whole, never in the middle of
// bytes the direct writes owed.
func TestTinyWindowByteReaderGetsEveryByteThenItsPipelinedAnswer(t *testing.T) {
	want := manyDeltas(15) // 90 KB
	up := startUpstream(t, streamOrMessage(func(w http.ResponseWriter) { sendFlushed(w, want, 1, 7, 300, 5000, 70000) }))
	for _, windowed := range []bool{false, true} {
		t.Run(fmt.Sprint("windowed=", windowed), func(t *testing.T) {
			_, px := startProxy(t, testConfig(t, up.URL, windowed, func(c *config.Config) {
				c.StreamIdleTimeout = 20 * time.Second
				c.StreamClientStall = 5 * time.Second
			}))
			c, err := net.Dial("tcp", px.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.(*net.TCPConn).SetReadBuffer(4096)
			c.SetDeadline(time.Now().Add(60 * time.Second))
			req := func(body string) string {
				return fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}
			if _, err := io.WriteString(c, req(streamRequestJSON)+req(requestJSON)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // the socket fills: direct writes owe bytes
			br := bufio.NewReaderSize(c, 16)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || len(resp.TransferEncoding) != 1 {
				t.Fatalf("stream: status %d, transfer encoding %v", resp.StatusCode, resp.TransferEncoding)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || string(got) != want {
				t.Fatalf("stream: %d of %d bytes (%v); equal: %v", len(got), len(want), err, string(got) == want)
			}
			resp2, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the pipelined answer: %v", err)
			}
			b2, err := io.ReadAll(resp2.Body)
			if err != nil || resp2.StatusCode != 200 || string(b2) != messageJSON {
				t.Fatalf("the pipelined answer: status %d, %q, %v", resp2.StatusCode, b2, err)
			}
		})
	}
}

// openStreamConn sends a streaming request on a fresh connection with a
// receive buffer of rcvbuf, reading nothing yet.
func openStreamConn(t *testing.T, addr string, rcvbuf int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.(*net.TCPConn).SetReadBuffer(rcvbuf)
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\nContent-Length: %d\r\n\r\n%s",
		len(streamRequestJSON), streamRequestJSON)
	return c
}

// Shutdown while a stream owes its client bytes (the client had stopped
// reading, the socket full): once the drain deadline passes the stream
// is cut, and the client, reading again, gets every event the upstream
// sent that sluice took, in valid chunks, then the in-band
// overloaded_error: the owed bytes go before sluice's last event.
func TestShutdownWhileAStreamOwesBytes(t *testing.T) {
	want := manyDeltas(30)
	sent := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		i := strings.Index(want, "event: content_block_stop")
		sendFlushed(w, want[:i], 3000, 20000)
		close(sent)
		<-r.Context().Done() // never ends on its own
	})
	cfg := testConfig(t, up.URL, false, func(c *config.Config) {
		c.StreamIdleTimeout = 30 * time.Second
		c.StreamClientStall = 0
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProxy(t, cfg, Options{Logger: quietLog, ParkWhenQueued: -1})
	if err != nil {
		t.Fatal(err)
	}
	stop := (&Server{Proxy: p, DrainTimeout: 500 * time.Millisecond, Log: quietLog}).Start(ln)
	defer stop()
	c := openStreamConn(t, ln.Addr().String(), 8192)
	<-sent
	time.Sleep(300 * time.Millisecond) // the relay writes what the socket takes, and owes the rest
	stopped := make(chan error, 1)
	stopAt := time.Now()
	go func() { stopped <- stop() }()
	time.Sleep(time.Second) // past the drain deadline: Abort has cut the stream
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %d bytes: %v", len(body), err)
	}
	i := strings.Index(want, "event: content_block_stop")
	if !strings.HasPrefix(string(body), want[:i]) || lastEventError(body) != "overloaded_error" {
		t.Fatalf("got %d bytes (upstream sent %d); prefix intact: %v; last event error %q", len(body), i, strings.HasPrefix(string(body), want[:i]), lastEventError(body))
	}
	t.Logf("read all %v after the stop", time.Since(stopAt))
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped %v after the stop", time.Since(stopAt))
}

// A client that reads a little of its stream and closes its connection
// (unread bytes in its buffer: a reset), while the direct writes owe it
// bytes: the stream ends, its slot comes back, the upstream call is
// cancelled, and nothing is left running (goleak, TestMain).
func TestClientThatClosesMidStreamGivesItsSlotBack(t *testing.T) {
	cancelled := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(cancelled)
		longStream(2048)(w, r)
	})
	p, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) {
		c.MaxConcurrency = 1
		c.StreamClientStall = 10 * time.Second
		c.StreamIdleTimeout = 30 * time.Second
	}))
	c := openStreamConn(t, px.Listener.Addr().String(), 4096)
	b := make([]byte, 300)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	c.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream call was not cancelled 5 s after the client closed")
	}
	eventually(t, "the slot back", func() bool { return p.GateStats().InFlight == 0 })
	eventually(t, "the connection let go", func() bool { return p.parker.Parked() == 0 })
}

// A client that reads a few bytes then nothing ever again, while the
// upstream keeps sending: cut by STREAM_CLIENT_STALL_S, its slot back.
func TestClientThatStopsAfterAFewBytesIsCut(t *testing.T) {
	up := startUpstream(t, longStream(2048))
	p, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) {
		c.MaxConcurrency = 1
		c.StreamClientStall = time.Second
		c.StreamIdleTimeout = 60 * time.Second
	}))
	start := time.Now()
	c := openStreamConn(t, px.Listener.Addr().String(), 4096)
	b := make([]byte, 700)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); p.GateStats().InFlight != 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("slot still held 10 s after the client stopped reading (STREAM_CLIENT_STALL_S=1)")
		}
	}
	t.Logf("slot back after %v", time.Since(start).Round(time.Millisecond))
	if got := counterValue(t, p, "sluice_stream_client_stalls_total"); got != 1 {
		t.Errorf("sluice_stream_client_stalls_total = %v; want 1", got)
	}
	c.Close()
	eventually(t, "the connection let go", func() bool { return p.parker.Parked() == 0 })
}

// An HTTP/1.0 client (no chunking: not taken over) and an HTTP/1.1 client
// that asks for Connection: close each get the whole stream, and then the
// connection's end.
func TestStreamToHTTP10AndConnectionCloseClients(t *testing.T) {
	want := manyDeltas(20)
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		sendFlushed(w, want, 1, 500, 9000)
	})
	_, px := startProxy(t, testConfig(t, up.URL, true))
	for _, tc := range []struct{ proto, extra string }{{"HTTP/1.0", ""}, {"HTTP/1.1", "Connection: close\r\n"}} {
		c, err := net.Dial("tcp", px.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		fmt.Fprintf(c, "POST /v1/messages %s\r\nHost: sluice\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\n%sContent-Length: %d\r\n\r\n%s",
			tc.proto, tc.extra, len(streamRequestJSON), streamRequestJSON)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.proto, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || string(body) != want {
			t.Fatalf("%s %q: %d of %d bytes, %v", tc.proto, tc.extra, len(body), len(want), err)
		}
		if n, err := br.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("%s %q: after the stream, read %d, %v; want the connection closed", tc.proto, tc.extra, n, err)
		}
	}
}
