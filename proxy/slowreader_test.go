package proxy

// Clients that read an answer slowly, or not at all for a while.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
)

// A stream's slot is held for the upstream's exchange, not for the
// client's reading: a client that reads nothing after the headers does
// not keep the slot once the upstream has finished, and still gets every
// byte when it reads later.
func TestSlowStreamReaderGivesTheSlotBackWhenTheUpstreamEnds(t *testing.T) {
	var want bytes.Buffer
	want.WriteString(sseEvents[0])
	delta := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + strings.Repeat("y", 1000) + "\"}}\n\n"
	for range 600 { // 600 KB: more than the sockets buffer for a reader with a small window
		want.WriteString(delta)
	}
	want.WriteString(sseEvents[len(sseEvents)-1])
	var sent atomic.Bool // the upstream has written its whole stream
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(want.Bytes())
		sent.Store(true)
	})
	p, px := startProxyWith(t, testConfig(t, up.URL, true, func(c *config.Config) {
		c.MaxConcurrency = 1
		c.StreamIdleTimeout = time.Minute
	}), Options{})
	d := net.Dialer{Control: nil}
	conn, err := d.Dial("tcp", px.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(streamRequestJSON), streamRequestJSON)
	// Reading nothing, the upstream must still get to send it all, and the
	// slot come back.
	eventually(t, "the upstream to have sent its whole stream to a client that reads nothing", sent.Load)
	eventually(t, "the slot of a client that reads nothing to come back once the upstream has finished", func() bool { return p.GateStats().InFlight == 0 && p.Queued() == 0 })
	// What it reads later is the upstream's stream as it was sent (read
	// through a small window, only its start is read here: the relay's
	// fidelity has tests of its own).
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(resp.Body, head); err != nil || resp.StatusCode != 200 || !bytes.Equal(head, want.Bytes()[:len(head)]) {
		t.Fatalf("status %d, read error %v: the stream's first 64 KB differ from the upstream's", resp.StatusCode, err)
	}
}

// A client that reads steadily but slowly is not cut: the idle timeout is
// for a client that takes nothing, and a large answer is written under a
// deadline renewed as the client takes it.
func TestSteadySlowReaderGetsTheWholeAnswer(t *testing.T) {
	big := `{"type":"message","content":[{"type":"text","text":"` + strings.Repeat("x", 160<<10) + `"}]}`
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, big)
	})
	_, px := startProxyWith(t, testConfig(t, up.URL, true, func(c *config.Config) { c.StreamIdleTimeout = time.Second }), Options{})
	conn, err := net.Dial("tcp", px.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(8 << 10)
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(requestJSON), requestJSON)
	// A few hundred KB/s, never a pause near the 1 s idle timeout: the
	// whole answer takes longer than the timeout.
	start := time.Now()
	var got bytes.Buffer
	buf := make([]byte, 8<<10)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		n, err := conn.Read(buf)
		got.Write(buf[:n])
		if bytes.HasSuffix(got.Bytes(), []byte(`"}]}`)) || err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("read %d bytes in %v", got.Len(), time.Since(start))
	if !bytes.HasSuffix(got.Bytes(), []byte(big[len(big)-1000:])) {
		t.Fatalf("a steady reader got %d bytes, cut before the end of the %d-byte answer", got.Len(), len(big))
	}
}

// The events held for slow readers share one bound: past it a stream waits
// for its own client, as when its own buffer is full; an empty pipe always
// takes one event, so every stream makes progress; and every byte comes
// back to the budget once written.
func TestStreamBuffersShareOneBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &byteQuota{limit: 100}
		sp := newStreamPipe(1000, shared)
		ev := bytes.Repeat([]byte("e"), 60)
		if err := sp.put(context.Background(), ev, false); err != nil {
			t.Fatal(err)
		}
		var second atomic.Bool
		go func() {
			if err := sp.put(context.Background(), ev, false); err == nil {
				second.Store(true)
			}
		}()
		synctest.Wait()
		if second.Load() || shared.Held() != 60 {
			t.Fatalf("past the shared bound: second put done=%v, held %d; want it waiting, 60 held", second.Load(), shared.Held())
		}
		other := newStreamPipe(1000, shared)
		if err := other.put(context.Background(), ev, false); err != nil || shared.Held() != 120 {
			t.Fatalf("an empty pipe past the bound: err %v, held %d; want its one event taken", err, shared.Held())
		}
		rec := httptest.NewRecorder()
		sp.start(rec, 200, time.Second)
		synctest.Wait()
		if !second.Load() {
			t.Fatal("the writer drained the pipe, yet the waiting put did not go on")
		}
		sp.close()
		sp.wait()
		other.close()
		other.start(httptest.NewRecorder(), 200, time.Second)
		other.wait()
		if rec.Body.Len() != 120 || shared.Held() != 0 {
			t.Fatalf("wrote %d bytes, %d still held; want 120 written and the budget back", rec.Body.Len(), shared.Held())
		}
	})
}
