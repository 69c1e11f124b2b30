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

// TestStalledReaderIsCutAndSlotReleased is issue 6 item 6: a client that
// reads a stream's headers and then stops reading must not hold a slot
// forever. Once the socket buffers are full, sluice's write to it blocks;
// the per-event write deadline (STREAM_IDLE_TIMEOUT_S) must end the
// exchange, cancel the upstream call and give the slot back. It runs on
// real loopback sockets (write deadlines need a real connection), so it
// polls against a generous bound instead of asserting exact times.
func TestStalledReaderIsCutAndSlotReleased(t *testing.T) {
	cancelled := make(chan struct{})
	event := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" +
		strings.Repeat("x", 64<<10) + "\"}}\n\n"
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for {
			if _, err := io.WriteString(w, event); err != nil {
				break
			}
			w.(http.Flusher).Flush()
			if r.Context().Err() != nil {
				break
			}
		}
		<-r.Context().Done()
		close(cancelled)
	})
	cfg := testConfig(t, up.URL, true, func(c *config.Config) {
		c.StreamIdleTimeout = time.Second
		c.MaxConcurrency = 1
	})
	p, px := startProxy(t, cfg)

	conn, err := net.Dial("tcp", px.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\nContent-Length: %d\r\n\r\n%s",
		len(streamRequestJSON), streamRequestJSON)
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("status line %q; want 200", status)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	// From here on the client reads nothing.
	if st := p.GateStats(); st.InFlight != 1 {
		t.Fatalf("gate while streaming = %+v; want the stream holding its slot", st)
	}
	stopped := time.Now()

	const bound = 15 * time.Second // the idle timeout is 1 s; this only guards against a hang
	deadline := time.Now().Add(bound)
	for p.GateStats().InFlight != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slot still held %v after the client stopped reading; want it released after about STREAM_IDLE_TIMEOUT_S=1s", bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	released := time.Since(stopped)
	select {
	case <-cancelled:
	case <-time.After(time.Until(deadline)):
		t.Fatal("the upstream call was not cancelled after the client stopped reading")
	}
	if st := p.GateStats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Fatalf("gate after the cut = %+v; want empty", st)
	}
	t.Logf("slot released %v after the client stopped reading", released.Round(time.Millisecond))
}
