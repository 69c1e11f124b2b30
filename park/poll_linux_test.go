//go:build linux

package park

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests run over loopback sockets, which the Parker's epoller
// watches; timing_test.go's run over in-memory pipes, which readWatcher
// watches.

// epollWatched reports whether rw is watched by an epoller rather than by
// a goroutine of its own.
func epollWatched(rw *Response) bool {
	_, ok := rw.w.(*epoller)
	return ok
}

// clientLabels mark the goroutines of a test's HTTP client: goroutines
// inherit their creator's labels, so the transport's per-connection
// goroutines (dial, read loop, write loop) carry them too.
var clientLabels = pprof.Labels("side", "client")

// goroutinesBySide counts the goroutines labelled as the client's and the
// others: the server's, the test's own and the runtime's.
func goroutinesBySide(t *testing.T) (server, client int) {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	// Each record is "<count> @ <pcs>", an optional "# labels: {...}" line,
	// then its stack; records are separated by blank lines.
	n, isClient := 0, false
	flush := func() {
		if isClient {
			client += n
		} else {
			server += n
		}
		n, isClient = 0, false
	}
	for line := range strings.SplitSeq(buf.String(), "\n") {
		if count, _, ok := strings.Cut(line, " @ "); ok && !strings.HasPrefix(line, "#") {
			flush()
			c, err := strconv.Atoi(count)
			if err != nil {
				t.Fatalf("goroutine profile record %q", line)
			}
			n = c
			continue
		}
		if strings.HasPrefix(line, "# labels: ") && strings.Contains(line, `"side":"client"`) {
			isClient = true
		}
	}
	flush()
	return server, client
}

// Parked requests, each on its own connection, cost the server no
// goroutine each: net/http's connection goroutines are gone with the
// hijack, and one epoller goroutine watches every parked socket.
func TestParkedRequestsHoldNoGoroutine(t *testing.T) {
	const n, idle = 200, 4
	type held struct {
		rw *Response
		id string
	}
	pk := New(0)
	parked := make(chan held, n)
	srv := startParked(t, pk, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rw, err := pk.Park(w, r)
		if err != nil {
			http.Error(w, "not parked: "+err.Error(), http.StatusInternalServerError)
			return
		}
		parked <- held{rw, r.URL.Query().Get("id")} // the test answers it; nothing here waits for it
	}))
	// Every request on its own connection: no cap on connections, and no
	// idle connection to share while all n are waiting. Of the idle
	// connections afterwards the client keeps `idle`, and closes the rest.
	tr := &http.Transport{MaxConnsPerHost: 2 * n, MaxIdleConnsPerHost: idle}
	c := &http.Client{Transport: tr}
	var clients sync.WaitGroup
	t.Cleanup(func() {
		// A failed test must not leave answers pending: Shutdown, in
		// startParked's cleanup, would wait for them.
		done := make(chan struct{})
		go func() { clients.Wait(); close(done) }()
		for timeout := time.After(10 * time.Second); ; {
			select {
			case h := <-parked:
				h.rw.Finish()
				continue
			case <-done:
			case <-timeout:
			}
			break
		}
		tr.CloseIdleConnections()
	})

	// Client and server share this process, and the client costs about 3
	// goroutines per request (the caller, the transport's read and write
	// loops): a runtime.NumGoroutine difference would mostly measure
	// net/http's client. So the client's goroutines are started under
	// clientLabels, which every goroutine they start inherits, and only the
	// rest are counted. If a client goroutine escaped the labels it would
	// count as the server's: the test would fail, not pass for nothing.
	serverBefore, _ := goroutinesBySide(t)
	errs := make(chan error, n)
	pprof.Do(context.Background(), clientLabels, func(context.Context) {
		for i := range n {
			clients.Add(1)
			go func() {
				defer clients.Done()
				resp, err := c.Post(fmt.Sprintf("%s/?id=%d", srv.URL, i), "text/plain", strings.NewReader("x"))
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := fmt.Sprintf("answer %d", i); err != nil || string(b) != want {
					errs <- fmt.Errorf("request %d: got %q, %v; want %q", i, b, err, want)
					return
				}
				errs <- nil
			}()
		}
	})
	waitParked(t, pk, n)

	// The server's connection goroutines exit once their handler returns
	// from a hijacked connection, which may lag Parked by a moment: so
	// wait for the count to settle, with a bound far below one per
	// request (the epoller's loop is one goroutine for them all).
	const bound = n / 10
	var grew, client int
	for deadline := time.Now().Add(10 * time.Second); ; {
		var server int
		server, client = goroutinesBySide(t)
		if grew = server - serverBefore; grew < bound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with %d requests parked the server side has %d more goroutines (want < %d); the client's: %d; runtime.NumGoroutine() = %d",
				n, grew, bound, client, runtime.NumGoroutine())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("%d requests parked: server side %+d goroutines, client side %d", n, grew, client)
	if pk.Parked() != n {
		t.Fatalf("Parked() = %d; want %d", pk.Parked(), n)
	}

	for range n {
		h := <-parked
		if !epollWatched(h.rw) {
			t.Errorf("request %s is not watched by the epoller", h.id)
		}
		h.rw.Write([]byte("answer " + h.id))
		h.rw.Finish()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	// The connections the client keeps stay parked, idle; the ones it
	// closes are seen to close.
	waitParked(t, pk, idle)
	tr.CloseIdleConnections()
	waitParked(t, pk, 0)
}

// Under the epoller the idle timeout is a timer per idle connection, not
// a read deadline: it closes the connection all the same.
func TestEpollIdleTimeoutClosesTheConnection(t *testing.T) {
	pk := New(200 * time.Millisecond)
	var epolled atomic.Bool
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		if rw != nil {
			epolled.Store(epollWatched(rw))
			rw.Write([]byte("ok"))
		}
	}))
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	resp, body, _ := reusedPost(t, c, srv.URL, "x")
	if body != "ok" || resp.Header.Get("X-Parked") == "no" {
		t.Fatalf("got %q, parked %q; want a parked answer", body, resp.Header.Get("X-Parked"))
	}
	if !epolled.Load() {
		t.Fatal("the parked request was not watched by the epoller")
	}
	// Idle after its answer, the connection is closed by the Parker once
	// the idle timeout passes; no bound on when, beyond the test's.
	for deadline := time.Now().Add(10 * time.Second); pk.Parked() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Parked() = %d long after the idle timeout; want 0", pk.Parked())
		}
	}
	// So the client's next request needs a new connection. A GET, which
	// the transport retries on a new connection if it picked the closed
	// one before noticing the close; either way the last connection it
	// got must be new.
	var info httptrace.GotConnInfo
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { info = i }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("next request: got %q; want %q", b, "ok")
	}
	if info.Reused {
		t.Fatal("the next request reused the connection the idle timeout should have closed")
	}
}

// TestShutdownClosesIdleFinishesActiveAndCutsTheRest (timing_test.go) over
// sockets: the epoller's paths (stop, failAll, close), with the real
// concurrency that a synctest bubble does not have.
func TestShutdownOverSocketsClosesIdleFinishesActiveAndCutsTheRest(t *testing.T) {
	pk := New(time.Hour)
	release := make(chan struct{})
	var released sync.Once
	cut := make(chan error, 1)
	var notEpolled atomic.Int32
	answer := slowStuckOrQuick(release, cut)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		if rw == nil {
			return
		}
		if !epollWatched(rw) {
			notEpolled.Add(1)
		}
		answer(rw, r)
	}))
	// After startParked's, so that it runs before: a failed test must not
	// strand the handler, nor Shutdown waiting for it.
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	slow, stuck := postInBackground(c, srv.URL+"/slow"), postInBackground(c, srv.URL+"/stuck")
	waitParked(t, pk, 2)
	if _, body, _ := reusedPost(t, c, srv.URL+"/", "x"); body != "quick" { // a third connection, idle once answered
		t.Fatalf("quick answer: got %q", body)
	}
	waitParked(t, pk, 3)
	if n := notEpolled.Load(); n != 0 {
		t.Fatalf("%d parked requests not watched by the epoller", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- pk.Shutdown(ctx) }()
	waitParked(t, pk, 2) // the idle one closed
	released.Do(func() { close(release) })
	r := <-slow
	if r.err != nil || r.body != "late but whole" || !r.resp.Close {
		t.Fatalf("the answer finished during shutdown: %+v (want it whole, with Connection: close)", r)
	}
	if err := <-shut; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown = %v; want the deadline it had to cut at", err)
	}
	if err := <-cut; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut request's context: %v", err)
	}
	if r := <-stuck; r.err == nil {
		t.Fatalf("the cut request's client got %+v; want an error", r)
	}
	if pk.Parked() != 0 {
		t.Fatalf("Parked() = %d after Shutdown; want 0", pk.Parked())
	}
}

// dialTCP connects to srv's listener on loopback.
func dialTCP(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*net.TCPConn)
}

// A client that half-closes after its request has left, as far as the
// server can tell: net/http cancels the request's context when the
// connection reads EOF, and the epoller sees EPOLLRDHUP.
func TestClientHalfCloseCancelsTheParkedRequest(t *testing.T) {
	pk := New(0)
	seen := make(chan error, 1)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		if rw == nil {
			seen <- errors.New("not parked")
			return
		}
		if !epollWatched(rw) {
			seen <- errors.New("not watched by the epoller")
			return
		}
		select {
		case <-rw.Context().Done():
			seen <- rw.Context().Err()
			if r.URL.Path == "/answer" {
				io.WriteString(rw, "late")
			}
		case <-time.After(5 * time.Second):
			seen <- errors.New("still not cancelled after 5s")
		}
	}))
	for _, tc := range []struct{ path, want string }{
		// What the handler answered anyway still reaches the client,
		// which can read; then the connection is closed.
		{"/answer", "HTTP/1.1 200 OK\r\n"},
		// Nothing answered: nothing sent, no empty 200 (issue 37, item
		// 5); the connection is closed.
		{"/nothing", ""},
	} {
		c := dialTCP(t, srv.Listener.Addr().String())
		if _, err := io.WriteString(c, "POST "+tc.path+" HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"); err != nil {
			t.Fatal(err)
		}
		// The client will send nothing more: its connection reads EOF on
		// the server's side, which net/http takes as the client gone.
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		if err := <-seen; !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: the request's context: %v; want it cancelled", tc.path, err)
		}
		got, err := io.ReadAll(c)
		if err != nil || !strings.HasPrefix(string(got), tc.want) || (tc.want == "" && len(got) > 0) {
			t.Fatalf("%s: after the cancellation the client read %q, %v; want %q first", tc.path, got, err, tc.want)
		}
		waitParked(t, pk, 0)
	}
}

// cork holds c's writes until it is half-closed, so that the bytes written
// and the FIN leave in one segment and reach the server together.
func cork(t *testing.T, c *net.TCPConn) {
	t.Helper()
	sc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 1) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
}

// readAnswer reads one answer from br and returns its body.
func readAnswer(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// watchReport waits for rw's watcher to report and says whether it
// reported the client gone (else: the client sent more).
func watchReport(t *testing.T, rw *Response) (gone bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		rw.mu.Lock()
		more, gone := rw.more, rw.gone
		rw.mu.Unlock()
		if more || gone {
			return gone
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not report")
		}
	}
}

// A client may send its next request and half-close at once, so that the
// request's bytes and the FIN arrive together. net/http serves that
// request (its connection reads EOF only after it), and so does
// readWatcher (it reads a byte first); the epoller sees EPOLLRDHUP with
// bytes still unread, which is not the client leaving.
func TestNextRequestArrivingWithTheFINIsServed(t *testing.T) {
	const one = "POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"
	const two = "POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"
	t.Run("after the answer", func(t *testing.T) {
		pk := New(0)
		srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
			if rw != nil {
				rw.Write([]byte("answer " + r.URL.Path))
			}
		}))
		c := dialTCP(t, srv.Listener.Addr().String())
		br := bufio.NewReader(c)
		io.WriteString(c, one)
		if got := readAnswer(t, br); got != "answer /one" {
			t.Fatalf("first answer: got %q", got)
		}
		waitParked(t, pk, 1) // idle, awaiting the next request
		cork(t, c)
		io.WriteString(c, two)
		c.CloseWrite()
		if got := readAnswer(t, br); got != "answer /two" {
			t.Fatalf("second answer: got %q; want %q", got, "answer /two")
		}
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Fatalf("after the second answer: %q, %v; want the connection closed", rest, err)
		}
	})
	t.Run("while answering", func(t *testing.T) {
		pk := New(0)
		first := make(chan *Response, 1)
		release := make(chan struct{})
		var released sync.Once
		srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
			if rw == nil {
				return
			}
			if r.URL.Path == "/one" {
				first <- rw
				<-release
				if rw.Context().Err() != nil {
					rw.Write([]byte("cancelled"))
					return
				}
			}
			rw.Write([]byte("answer " + r.URL.Path))
		}))
		t.Cleanup(func() { released.Do(func() { close(release) }) }) // before startParked's Shutdown
		c := dialTCP(t, srv.Listener.Addr().String())
		br := bufio.NewReader(c)
		io.WriteString(c, one)
		rw := <-first
		if !epollWatched(rw) {
			t.Fatal("not watched by the epoller")
		}
		cork(t, c)
		io.WriteString(c, two)
		c.CloseWrite()
		if watchReport(t, rw) {
			t.Fatal("the pipelined request and FIN were taken for the client leaving")
		}
		released.Do(func() { close(release) })
		for _, want := range []string{"answer /one", "answer /two"} {
			if got := readAnswer(t, br); got != want {
				t.Fatalf("got %q; want %q", got, want)
			}
		}
	})
}
