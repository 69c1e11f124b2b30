package proxy

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// A body that cannot be read while the client is still there (a bad chunk
// size here) is the client's mistake: it gets a 400, not an empty 200.
func TestUnreadableBodyIs400(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		up := startUpstream(t, apiHandler)
		_, px := startProxy(t, testConfig(t, up.URL, windowed))
		conn, err := net.Dial("tcp", px.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		wantError(t, resp, 400, "invalid_request_error", "request body")
	})
}

// Go's client, the TypeScript SDK's fetch and httpx all ask for gzip. If
// sluice relayed that to the upstream, a compressed batch object would pass
// through with the upstream's results_url.
func TestBatchResultsURLRewrittenWhenClientAcceptsGzip(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body := `{"id":"msgbatch_1","type":"message_batch","results_url":"https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"}`
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, body)
			zw.Close()
			return
		}
		io.WriteString(w, body)
	})
	_, px := startProxy(t, testConfig(t, up.URL, false))
	resp, err := http.Get(px.URL + "/v1/messages/batches/msgbatch_1") // sends Accept-Encoding: gzip
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := readAll(t, resp.Body); !strings.Contains(got, `"results_url":"`+px.URL+`/v1/messages/batches/msgbatch_1/results"`) {
		t.Fatalf("results_url not rewritten: %s", got)
	}
}

// A client that never reads its large JSON answer must not pin its slot
// past the idle timeout. Real sockets (write deadlines need them); the test
// polls with a bound instead of asserting a time.
func TestStalledJSONReaderReleasesSlot(t *testing.T) {
	big := `{"type":"message","content":[{"type":"text","text":"` + strings.Repeat("x", 6<<20) + `"}]}`
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, big)
	})
	p, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) {
		c.StreamIdleTimeout = time.Second
		c.MaxConcurrency = 1
	}))
	conn, err := net.Dial("tcp", px.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		len(requestJSON), requestJSON)
	// never read
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if p.GateStats().InFlight == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the request never took its slot")
		}
	}
	for deadline := time.Now().Add(15 * time.Second); p.GateStats().InFlight != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a client that stopped reading still holds the slot: %+v", p.GateStats())
		}
	}
}

// A client that announces a 32 MB body and sends one byte must cost what it
// sent, not what it announced.
func TestAnnouncedBodyIsNotPreallocated(t *testing.T) {
	up := startUpstream(t, apiHandler)
	p, err := newProxy(t, testConfig(t, up.URL, true), Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	var reading atomic.Int32
	px := httptest.NewUnstartedServer(p)
	px.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateActive {
			reading.Add(1) // headers read: the handler is reading the body
		}
	}
	px.Start()
	t.Cleanup(func() { px.Close(); p.Close() })

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 20
	for range n {
		c, err := net.Dial("tcp", px.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", 32<<20)
	}
	for deadline := time.Now().Add(10 * time.Second); reading.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d requests reached the handler", reading.Load(), n)
		}
	}
	// Each handler has taken its first chunk of the body budget, which it
	// does as it starts reading the body (readAllOf), after anything it
	// allocated before: what it holds is in the heap now.
	eventually(t, "each handler to begin reading its body", func() bool { return p.bodies.Held() >= n*bodyChunk })
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 16<<20 {
		t.Fatalf("%d requests that sent 1 byte each hold %d MB of heap", n, grew>>20)
	}
}
