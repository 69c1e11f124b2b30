package proxy

// Readers at controlled rates behind a fast upstream, over loopback with a
// small receive buffer (issue 37, item 7).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
)

// bigStream is an SSE answer of n content_block_delta events of about 1 KB
// each, whole.
func bigStream(n int) []byte {
	var b bytes.Buffer
	b.WriteString(sseEvents[0])
	delta := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + strings.Repeat("y", 1000) + "\"}}\n\n"
	for range n {
		b.WriteString(delta)
	}
	b.WriteString(sseEvents[len(sseEvents)-1])
	return b.Bytes()
}

// slowCutRig is a proxy before an upstream that sends a 4 MB stream at once
// (more than sluice's buffer for it, and than the sockets hold for a
// client with a small receive window), its access lines kept.
func slowCutRig(t *testing.T, edit func(*config.Config)) (*Proxy, *testServer, *syncWriter) {
	t.Helper()
	stream := bigStream(4000)
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(stream)
	})
	logs := &syncWriter{w: &bytes.Buffer{}}
	p, px := startProxyWith(t, testConfig(t, up.URL, false, edit), Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	return p, px, logs
}

// dialSmallWindow connects with a 4 KB receive buffer, set before the
// connection so that the window it offers is small from the start.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return nil
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(streamRequestJSON), streamRequestJSON)
	return conn
}

// loggedRequests are the access lines logged so far.
func loggedRequests(logs *syncWriter) []map[string]any {
	logs.mu.Lock()
	text := logs.w.(*bytes.Buffer).String()
	logs.mu.Unlock()
	var lines []map[string]any
	for _, l := range strings.Split(text, "\n") {
		var v map[string]any
		if json.Unmarshal([]byte(l), &v) == nil && v["msg"] == "request" {
			lines = append(lines, v)
		}
	}
	return lines
}

// A client that keeps reading is not cut for reading slowly: readers of
// 1, 8 and 50 KB/s through a 4 KB receive buffer, for 2.2 times
// STREAM_IDLE_TIMEOUT_S, are still being served (no access line yet: the
// stream has not ended). Before (81f80b9), each piece of a write had a
// deadline of STREAM_IDLE_TIMEOUT_S from its start whatever the client
// took meanwhile, and a 32 KB piece took longer than that at 1 and 8 KB/s:
// those streams were cut, their access line saying 200.
func TestSlowReadersAreNotCutWhileTheyRead(t *testing.T) {
	const idle = 10 * time.Second // the issue's
	for _, rate := range []int{1 << 10, 8 << 10, 50 << 10} {
		t.Run(fmt.Sprintf("%dKBps", rate>>10), func(t *testing.T) {
			t.Parallel()
			_, px, logs := slowCutRig(t, func(c *config.Config) {
				c.StreamIdleTimeout, c.StreamClientStall = idle, idle
			})
			conn := dialSmallWindow(t, px.Listener.Addr().String())
			step := rate / 10 // every 100 ms
			buf := make([]byte, step)
			got := 0
			for start := time.Now(); time.Since(start) < 22*time.Second; time.Sleep(100 * time.Millisecond) {
				conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				n, err := io.ReadFull(conn, buf)
				got += n
				if err != nil {
					t.Fatalf("after %d bytes at %d B/s: %v", got, rate, err)
				}
			}
			if lines := loggedRequests(logs); len(lines) != 0 {
				t.Fatalf("a client reading %d B/s was cut after %d bytes: %v", rate, got, lines)
			}
		})
	}
}

// A client that takes nothing while sluice has bytes for it is cut after
// STREAM_IDLE_TIMEOUT_S (the stall bound off), and says so: the access
// line's client_cut and sluice_stream_client_stalls_total. Before, the cut
// was silent: an access line of 200 and nothing else, the counter at 0.
func TestClientTakingNothingIsCutAndSaidSo(t *testing.T) {
	p, px, logs := slowCutRig(t, func(c *config.Config) {
		c.StreamIdleTimeout, c.StreamClientStall = 2*time.Second, 0
	})
	dialSmallWindow(t, px.Listener.Addr().String())
	eventually(t, "the access line of a client that reads nothing", func() bool { return len(loggedRequests(logs)) > 0 })
	line := loggedRequests(logs)[0]
	if line["client_cut"] != "client_idle" {
		t.Errorf("access line %v; want client_cut=client_idle", line)
	}
	if got := counterValue(t, p, "sluice_stream_client_stalls_total"); got != 1 {
		t.Errorf("sluice_stream_client_stalls_total = %v; want 1", got)
	}
}

// deadlineWriter records the write deadlines set on it.
type deadlineWriter struct {
	http.ResponseWriter
	mu       sync.Mutex
	deadline time.Time
}

func (w *deadlineWriter) SetWriteDeadline(t time.Time) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadline = t
	return nil
}

func (w *deadlineWriter) get() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deadline
}

// The renewal in virtual time: while the client's acknowledged count
// moves, the write's deadline stays 1.25 × idle ahead of the last move
// seen; once it stops moving, the deadline is left to pass within 1.25 ×
// idle of the last move; after stop, nothing renews it.
func TestWriteDeadlineFollowsTheClientsProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 8 * time.Second
		var acked atomic.Uint64
		w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
		sp := newStreamPipe(1<<20, &byteQuota{limit: 1 << 20})
		sp.idle, sp.rc, sp.progress = idle, http.NewResponseController(w), func() uint64 { return acked.Load() }
		stop, bound := sp.keepRenewing()
		if bound != idle+idle/4 {
			t.Fatalf("bound %v; want 1.25 × idle", bound)
		}
		start := time.Now()
		sp.renew(sp.rc, bound) // as the write's first piece does
		// A byte taken every 5 s for a minute: never within 1 s of
		// its deadline.
		for range 12 {
			time.Sleep(5 * time.Second)
			acked.Add(1)
			synctest.Wait()
			if left := time.Until(w.get()); left < time.Second {
				t.Fatalf("at %v, a client taking a byte every 5 s has %v before its deadline", time.Since(start), left)
			}
		}
		// Then nothing: once the last move has been seen, no renewal.
		time.Sleep(idle/4 + time.Second)
		last := w.get()
		time.Sleep(3 * idle)
		if !w.get().Equal(last) || last.Sub(time.Now()) > 0 {
			t.Fatalf("a client that took nothing for %v: deadline %v from now; want it passed and not renewed", 3*idle, time.Until(last))
		}
		stop()
		acked.Add(1)
		time.Sleep(idle)
		if !w.get().Equal(last) {
			t.Fatal("renewed after stop")
		}
	})
}
