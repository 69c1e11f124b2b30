package proxy

// Tests of the worst day (issue 11): hostile clients and a failing
// upstream. Each failed on the code before it. Socket behaviour runs over
// real loopback sockets and polls against generous bounds, asserting no
// timing; time-driven behaviour runs in virtual time.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/memnet"
	"github.com/sluicehq/sluice/upstream"
)

// rawRequest writes head (the request line and headers, without the blank
// line) and part of a body to a fresh connection, and returns it.
func rawRequest(t *testing.T, addr, head, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	return conn
}

// readAnswer reads one response from conn within a generous bound.
func readAnswer(t *testing.T, conn net.Conn, br *bufio.Reader) (*http.Response, []byte) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read answer body: %v", err)
	}
	return resp, body
}

// wantErrorAnswer is wantError on an answer readAnswer has read.
func wantErrorAnswer(t *testing.T, resp *http.Response, body []byte, status int, errType, hint string) {
	t.Helper()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	wantError(t, resp, status, errType, hint)
}

// eventually polls cond until it holds, failing t after a generous bound:
// for state that real sockets reach at their own pace.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// wantConnRefused dials addr and wants the 529 of a connection past
// MAX_PENDING_CONNS.
func wantConnRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, body := readAnswer(t, c, bufio.NewReader(c))
	wantErrorAnswer(t, resp, body, 529, "overloaded_error", "MAX_PENDING_CONNS")
}

// A body that stops arriving is answered 408 on every path that reads a
// body, then the connection is closed; never left hanging, never an empty
// 200 (which a 1 MB declared body used to get).
func TestStalledBodyIsAnswered408AndTheConnectionClosed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		windowed bool
		path     string
		declared int
	}{
		{"messages plain", false, "/v1/messages", 100},
		{"messages windowed", true, "/v1/messages", 100},
		{"messages windowed, 1 MB declared", true, "/v1/messages", 1 << 20},
		{"count_tokens", true, "/v1/messages/count_tokens", 100},
		{"batches", true, "/v1/messages/batches", 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, apiHandler)
			_, px := startProxyWith(t, testConfig(t, up.URL, tc.windowed), Options{BodyReadTimeout: time.Second})
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\nContent-Length: %d", tc.path, tc.declared)
			conn := rawRequest(t, px.Listener.Addr().String(), head, `{"model":"`)
			br := bufio.NewReader(conn)
			resp, body := readAnswer(t, conn, br)
			wantErrorAnswer(t, resp, body, http.StatusRequestTimeout, "invalid_request_error", "did not arrive")
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the 408 the connection is still open (read: %v)", err)
			}
		})
	}
}

// Bodies held by waiting requests have a budget: past it a request is
// answered 529 with retry-after before its body is read, and the budget
// comes back when the request ends.
func TestBodyBudgetSheds529BeforeTheBodyIsRead(t *testing.T) {
	up, holding, release := heldUpstream(t)
	t.Cleanup(release)
	p, px := startProxyWith(t, testConfig(t, up, true, func(c *config.Config) { c.BodyBudget = 1 << 20 }), Options{})
	big := `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"` + strings.Repeat("x", 700<<10) + `"}]}`
	first := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Post(px.URL+"/v1/messages", "application/json", strings.NewReader(big))
		if err != nil {
			t.Error(err)
			close(first)
			return
		}
		first <- resp
	}()
	waitFor(t, holding, "the first request to reach the upstream")
	if held := p.bodies.Held(); held != int64(len(big)) {
		t.Errorf("budget holds %d bytes with one request waiting; want its %d", held, len(big))
	}
	// The second is refused on its headers: it sends them and no body.
	head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d", len(big))
	conn := rawRequest(t, px.Listener.Addr().String(), head, "")
	resp, body := readAnswer(t, conn, bufio.NewReader(conn))
	wantErrorAnswer(t, resp, body, 529, "overloaded_error", "BODY_BUDGET_MB")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("529 past the budget carries no retry-after")
	}
	release()
	if resp := <-first; resp == nil || resp.StatusCode != 200 {
		t.Fatalf("the waiting request was not served: %v", resp)
	} else {
		resp.Body.Close()
	}
	eventually(t, "the budget to come back after every request ended", func() bool { return p.bodies.Held() == 0 })
	resp, err := http.Post(px.URL+"/v1/messages", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the budget came back: status %d", resp.StatusCode)
	}
	waitForServerLinger()
}

// A body's declared length takes no budget until its bytes arrive: eight
// clients that declare 32 MB and send one byte do not lock everyone else
// out.
func TestBodyBudgetIsTakenAsBytesArriveNotAsDeclared(t *testing.T) {
	up := startUpstream(t, apiHandler)
	p, px := startProxyWith(t, testConfig(t, up.URL, true), Options{BodyReadTimeout: 30 * time.Second})
	for range 8 {
		head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d", 32<<20)
		rawRequest(t, px.Listener.Addr().String(), head, "{")
	}
	eventually(t, "the eight promises to hold their first chunks", func() bool { return p.bodies.Held() >= 8*bodyChunk })
	if held := p.bodies.Held(); held > 8*bodyChunk {
		t.Errorf("eight 1-byte bodies that declared 32 MB hold %d bytes of the budget; want at most %d", held, 8*bodyChunk)
	}
	if r := post(t, px.URL, "/v1/messages", requestJSON); r.StatusCode != 200 {
		t.Fatalf("a normal request beside them: status %d", r.StatusCode)
	}
}

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

// At the drain deadline nothing accepted ends without an answer: requests
// in line or in flight get 529 with retry-after, a stream that had begun
// gets an in-band error event.
func TestShutdownAnswersEveryAcceptedRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		upLn := memnet.NewListener()
		upSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(`"stream":true`)) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, sseEvents[0])
				w.(http.Flusher).Flush()
			}
			<-r.Context().Done() // then never finishes
		})}
		go upSrv.Serve(upLn)
		defer upSrv.Close()
		cfg := testConfig(t, "http://upstream.test", true, func(c *config.Config) { c.MaxConcurrency = 2 })
		p, err := newProxy(t, cfg, Options{Upstream: upstream.New(cfg.UpstreamURL, upstream.Options{DialContext: upLn.Dial}), Logger: quietLog, ParkWhenQueued: -1})
		if err != nil {
			t.Fatal(err)
		}
		pxLn := memnet.NewListener()
		ctx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- (&Server{Proxy: p, DrainTimeout: 2 * time.Second, Log: quietLog}).Serve(ctx, pxLn) }()
		tr := &http.Transport{DialContext: pxLn.Dial}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}

		type answer struct {
			status int
			retry  string
			body   []byte
			err    error
		}
		bodies := []string{streamRequestJSON, requestJSON, requestJSON, requestJSON, requestJSON, requestJSON}
		answers := make([]answer, len(bodies))
		var wg sync.WaitGroup
		for i, b := range bodies {
			wg.Go(func() {
				resp, err := client.Post("http://sluice.test/v1/messages", "application/json", strings.NewReader(b))
				if err != nil {
					answers[i].err = err
					return
				}
				answers[i].status, answers[i].retry = resp.StatusCode, resp.Header.Get("Retry-After")
				answers[i].body, answers[i].err = io.ReadAll(resp.Body)
				resp.Body.Close()
			})
			time.Sleep(5 * time.Millisecond) // in this order: the stream takes a slot first
		}
		if st := p.GateStats(); st.InFlight != 2 || st.Waiting != 4 {
			t.Errorf("before the signal: gate %+v; want 2 in flight and 4 in line", st)
		}
		start := time.Now()
		stop()
		wg.Wait()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if took := time.Since(start); took < 2*time.Second || took > 2*time.Second+abortGrace {
			t.Errorf("shutdown took %v; want the 2 s drain and at most the grace after it", took)
		}
		for i, a := range answers {
			switch {
			case a.err != nil:
				t.Errorf("request %d got no whole answer: %v", i, a.err)
			case i == 0:
				if a.status != 200 || lastEventError(a.body) != "overloaded_error" || !bytes.HasPrefix(a.body, []byte(sseEvents[0])) {
					t.Errorf("the stream: status %d, body %q; want its events, then an in-band overloaded_error", a.status, a.body)
				}
			default:
				if a.status != 529 || a.retry == "" || !bytes.Contains(a.body, []byte("shutting down")) {
					t.Errorf("request %d: status %d, retry-after %q, body %s; want 529 shutting down with retry-after", i, a.status, a.retry, a.body)
				}
			}
		}
	})
}

// results_url is built from PUBLIC_URL, never from the client's Host
// header: the SDKs fetch it verbatim, with the API key.
func TestResultsURLIgnoresTheHostHeader(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msgbatch_1","type":"message_batch","results_url":"https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"}`)
	})
	public, _ := url.Parse("https://sluice.internal:8443/gw")
	_, px := startProxyWith(t, testConfig(t, up.URL, false, func(c *config.Config) { c.PublicURL = public }), Options{})
	conn := rawRequest(t, px.Listener.Addr().String(), "GET /v1/messages/batches/msgbatch_1 HTTP/1.1\r\nHost: evil.example:21999\r\nX-Api-Key: sk-test", "")
	_, body := readAnswer(t, conn, bufio.NewReader(conn))
	if want := `"results_url":"https://sluice.internal:8443/gw/v1/messages/batches/msgbatch_1/results"`; !strings.Contains(string(body), want) || strings.Contains(string(body), "evil") {
		t.Fatalf("batch = %s; want %s", body, want)
	}
}

// Connections that have not sent their request are bounded: one past
// MAX_PENDING_CONNS is answered 529 and closed at once, and requests get
// through again once the idle ones are gone.
func TestPendingConnectionsAreBounded(t *testing.T) {
	up := startUpstream(t, apiHandler)
	p, px := startProxyWith(t, testConfig(t, up.URL, false, func(c *config.Config) { c.MaxPendingConns = 3 }), Options{})
	addr := px.Listener.Addr().String()

	var idle []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	eventually(t, "the server to count 3 idle connections", func() bool { return p.pendingConns.n.Load() >= 3 })
	wantConnRefused(t, addr)
	for _, c := range idle {
		c.Close()
	}
	eventually(t, "no connection counted after the idle ones closed", func() bool { return p.pendingConns.n.Load() == 0 })
	r := post(t, "http://"+addr, "/v1/messages", requestJSON)
	if r.StatusCode != 200 {
		t.Fatalf("after the idle connections left: status %d", r.StatusCode)
	}
	r.Body.Close()
	http.DefaultClient.CloseIdleConnections() // an idle keep-alive connection counts too
	eventually(t, "no connection counted after the client closed its idle one", func() bool { return p.pendingConns.n.Load() == 0 })

	// A connection that has been answered once counts again while it sends
	// its next request: keep-alive is no way around the bound.
	var stalled []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
		br := bufio.NewReader(c)
		if resp, _ := readAnswer(t, c, br); resp.StatusCode != 200 {
			t.Fatalf("healthz: %d", resp.StatusCode)
		}
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: sl") // half the next request's headers
		stalled = append(stalled, c)
	}
	eventually(t, "3 connections halfway through their next request to be counted", func() bool { return p.pendingConns.n.Load() >= 3 })
	wantConnRefused(t, addr)
	for _, c := range stalled {
		c.Close()
	}
}

// A path with empty or dot segments gets an Anthropic-shaped 404, not Go's
// plain-text redirect.
func TestUncleanPathIsAnAnthropicShaped404(t *testing.T) {
	up := startUpstream(t, apiHandler)
	_, px := startProxy(t, testConfig(t, up.URL, false))
	for _, path := range []string{"//v1/models", "/v1/../v1/models", "/v1/%2e%2e/models"} {
		conn := rawRequest(t, px.Listener.Addr().String(), "GET "+path+" HTTP/1.1\r\nHost: sluice", "")
		resp, body := readAnswer(t, conn, bufio.NewReader(conn))
		wantErrorAnswer(t, resp, body, http.StatusNotFound, "not_found_error", "dot segments")
	}
}

// A relayed path has an upstream response timeout: a hanging upstream no
// longer holds its client forever.
func TestRelayedPathTimesOutAHangingUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}, func(c *config.Config) { c.UpstreamTimeout = 3 * time.Second })
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, rig.url+"/v1/messages/count_tokens", strings.NewReader(requestJSON))
		resp, err := rig.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if took := time.Since(start); took != 3*time.Second {
			t.Errorf("answered after %v; want UPSTREAM_TIMEOUT_S, 3s", took)
		}
		wantError(t, resp, http.StatusGatewayTimeout, "timeout_error", "UPSTREAM_TIMEOUT_S")
	})
}

// The errors Go's HTTP server writes itself, before any handler, come out
// Anthropic-shaped with their status.
func TestGoServerErrorsAreAnthropicShaped(t *testing.T) {
	up := startUpstream(t, apiHandler)
	_, px := startProxyWith(t, testConfig(t, up.URL, true), Options{})
	ln := px.Listener
	for _, tc := range []struct {
		name, head string
		status     int
	}{
		{"bad framing", "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Length: 1\r\nContent-Length: 2", 400},
		{"no Host", "GET /v1/models HTTP/1.1", 400},
		{"headers too large", "GET /v1/models HTTP/1.1\r\nHost: sluice\r\nX-Big: " + strings.Repeat("a", 1<<20+4096), 431},
		{"unsupported transfer encoding", "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nTransfer-Encoding: gzip", 501},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := rawRequest(t, ln.Addr().String(), tc.head, "")
			resp, body := readAnswer(t, conn, bufio.NewReader(conn))
			resp.Body = io.NopCloser(bytes.NewReader(body))
			errType := "invalid_request_error"
			if tc.status == 501 {
				errType = "api_error"
			}
			wantError(t, resp, tc.status, errType, "well-formed")
		})
	}
	// A request the server can read is untouched, and so is parking.
	if r := post(t, "http://"+ln.Addr().String(), "/v1/messages", requestJSON); r.StatusCode != 200 {
		t.Fatalf("a good request through the shaping: status %d", r.StatusCode)
	}
	waitForServerLinger()
}

// waitForServerLinger waits for Go's server to let go of connections it
// closes after refusing a request whose body it did not read: it lingers
// 500 ms on each, so that the client can read the answer before the
// close, and the leak check must not count those goroutines.
func waitForServerLinger() {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		buf := make([]byte, 1<<20)
		if !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("closeWriteAndWait")) || time.Now().After(deadline) {
			return
		}
	}
}

// Only Go's own error answers are rewritten: an answer that merely carries
// the same headers, in its body or in its header block, passes untouched.
func TestShapingLeavesOtherAnswersAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write string
		shape bool
	}{
		{"Go's own 400", "HTTP/1.1 400 Bad Request" + goServerErrorHeaders + "400 Bad Request", true},
		{"Go's own 431", "HTTP/1.1 431 Request Header Fields Too Large" + goServerErrorHeaders + "431 Request Header Fields Too Large", true},
		{"the headers in a body", "HTTP/1.1 200 OK\r\nDate: x\r\nContent-Length: 80\r\n\r\nline one" + goServerErrorHeaders + "line two", false},
		{"a handler's answer with those headers", "HTTP/1.1 200 OK\r\nDate: Mon\r\nContent-Length: 3\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nhi\n", false},
		{"a long body", "HTTP/1.1 400 Bad Request" + goServerErrorHeaders + strings.Repeat("x", 600), false},
		{"a body of two lines", "HTTP/1.1 400 Bad Request" + goServerErrorHeaders + "a\nb", false},
	} {
		if got := isGoServerError([]byte(tc.write)); got != tc.shape {
			t.Errorf("%s: rewritten = %v; want %v", tc.name, got, tc.shape)
		}
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
		shared := &byteBudget{limit: 100}
		sp := newStreamPipe(1000, shared)
		ev := bytes.Repeat([]byte("e"), 60)
		if err := sp.put(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		var second atomic.Bool
		go func() {
			if err := sp.put(context.Background(), ev); err == nil {
				second.Store(true)
			}
		}()
		synctest.Wait()
		if second.Load() || shared.Held() != 60 {
			t.Fatalf("past the shared bound: second put done=%v, held %d; want it waiting, 60 held", second.Load(), shared.Held())
		}
		other := newStreamPipe(1000, shared)
		if err := other.put(context.Background(), ev); err != nil || shared.Held() != 120 {
			t.Fatalf("an empty pipe past the bound: err %v, held %d; want its one event taken", err, shared.Held())
		}
		rec := httptest.NewRecorder()
		go sp.writeTo(rec, 200, time.Second)
		synctest.Wait()
		if !second.Load() {
			t.Fatal("the writer drained the pipe, yet the waiting put did not go on")
		}
		sp.close()
		sp.wait()
		other.close()
		go other.writeTo(httptest.NewRecorder(), 200, time.Second)
		other.wait()
		if rec.Body.Len() != 120 || shared.Held() != 0 {
			t.Fatalf("wrote %d bytes, %d still held; want 120 written and the budget back", rec.Body.Len(), shared.Held())
		}
	})
}
