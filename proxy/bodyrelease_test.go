package proxy

// A stream's request body is let go of once its events are being relayed
// (letGoOfBody).

import (
	"bufio"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	recording "github.com/sluicehq/sluice/record"
)

// silentStreamUpstream answers every call with a stream's first events and
// then stays silent, as a model thinking does, until the test ends.
func silentStreamUpstream(t *testing.T) string {
	t.Helper()
	quiet := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{sseEvents[0], sseEvents[1], sseEvents[3]} {
			io.WriteString(w, ev)
		}
		w.(http.Flusher).Flush()
		select {
		case <-quiet:
		case <-r.Context().Done():
		}
	})
	t.Cleanup(func() { close(quiet) }) // before the server's Close, which waits for the handler
	return up.URL
}

// bigStreamRequest is a streaming Messages body of about n bytes.
func bigStreamRequest(n int) string {
	const head, tail = `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"`, `"}]}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

// While a stream is open and silent, its request's bytes are collected
// and its share of BODY_BUDGET_MB is back: an agent's stream stays open
// for minutes, and nothing sends its request again once it has begun.
func TestStreamLetsGoOfItsBodyOnceRelayed(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		up := silentStreamUpstream(t)
		// Set before the proxy starts, and unset after it stops: the
		// hook is read on its connections' goroutines.
		read := make(chan weak.Pointer[byte], 1)
		bodyReadHook = func(data []byte) { read <- weak.Make(&data[0]) }
		t.Cleanup(func() { bodyReadHook = nil })
		p, px := startProxy(t, testConfig(t, up, windowed))

		body := bigStreamRequest(512 << 10)
		resp := post(t, px.URL, "/v1/messages", body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("the stream ended before its first delta: %v", err)
			}
			if strings.HasPrefix(line, "event: content_block_delta") {
				break
			}
		}
		var held weak.Pointer[byte]
		select {
		case held = <-read:
		default:
			t.Fatal("sluice read no body")
		}
		// The stream is open: its upstream is silent, its client reading.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			runtime.GC()
			if held.Value() == nil && p.bodies.Held() == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("with the stream open and relaying: its %d-byte body collected %v, budget holds %d bytes; want collected and 0",
					len(body), held.Value() == nil, p.bodies.Held())
			}
		}
		resp.Body.Close()
	})
}

// Before its stream begins, a request keeps its body: a retry resends it.
// The first attempt gets a 529, the second the stream, which must carry
// the whole body.
func TestStreamBodyKeptForRetryBeforeTheStream(t *testing.T) {
	var mu sync.Mutex
	var got []int
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, len(b))
		first := len(got) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(529)
			io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			return
		}
		writeStream(w)
	})
	p, px := startProxy(t, testConfig(t, up.URL, true))
	body := bigStreamRequest(256 << 10)
	resp := post(t, px.URL, "/v1/messages", body)
	if s := readAll(t, resp.Body); resp.StatusCode != 200 || !strings.Contains(s, "message_stop") {
		t.Fatalf("status %d, body %q", resp.StatusCode, s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] != len(body) || got[1] != len(body) {
		t.Fatalf("the upstream got bodies of %v bytes; want two of %d", got, len(body))
	}
	eventually(t, "the budget to come back", func() bool { return p.bodies.Held() == 0 })
}

// RECORD_FILE keeps a stream's body to walk it once the exchange ends: its
// share of BODY_BUDGET_MB stays taken with it, to come back at the end.
func TestRecordedStreamKeepsItsBodyBudget(t *testing.T) {
	up := silentStreamUpstream(t)
	rc, err := recording.Open(recording.Config{Path: filepath.Join(t.TempDir(), "rec.jsonl"), MaxBytes: 1 << 20, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	p, px := startProxyWith(t, testConfig(t, up, true), Options{Recorder: rc})
	body := bigStreamRequest(256 << 10)
	resp := post(t, px.URL, "/v1/messages", body)
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	// Its first event is through: its relay has begun.
	if held := p.bodies.Held(); held != int64(len(body)) {
		t.Errorf("a recorded stream's budget holds %d bytes while it is open; want its body's %d", held, len(body))
	}
	resp.Body.Close()
	eventually(t, "the budget to come back when the stream ends", func() bool { return p.bodies.Held() == 0 })
}
