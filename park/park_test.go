package park

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// answer is what a test's parked handler does with a parked request, in its
// own goroutine, before Finish.
type answer func(rw *Response, r *http.Request)

// parkingHandler reads the body, parks the request and answers it with a
// in a goroutine, as sluice's proxy does. A request that cannot be parked
// is answered in place with the header X-Parked: no.
func parkingHandler(pk *Parker, a answer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Request-Id", "req-1") // set before parking: must survive it
		rw, err := pk.Park(w, r)
		if err != nil {
			w.Header().Set("X-Parked", "no")
			a(nil, r)
			return
		}
		go func() {
			a(rw, r)
			rw.Finish()
		}()
	})
}

// startParked serves h on loopback through pk's Listener.
func startParked(t *testing.T, pk *Parker, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = pk.Listener(srv.Listener)
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		if err := pk.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return srv
}

func say(body string) answer {
	return func(rw *Response, r *http.Request) {
		if rw == nil {
			return
		}
		rw.Write([]byte(body))
	}
}

// reusedPost posts and reports whether the request went over a reused
// connection.
func reusedPost(t *testing.T, c *http.Client, url, body string) (*http.Response, string, bool) {
	t.Helper()
	var reused bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodPost, url, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b), reused
}

func TestParkedAnswersKeepTheConnection(t *testing.T) {
	pk := New(0)
	srv := startParked(t, pk, parkingHandler(pk, say(`{"ok":true}`)))
	c := srv.Client()
	for i := range 3 {
		resp, body, reused := reusedPost(t, c, srv.URL, "hello")
		if body != `{"ok":true}` {
			t.Fatalf("request %d: body %q", i, body)
		}
		if resp.Header.Get("X-Parked") == "no" {
			t.Fatalf("request %d was not parked", i)
		}
		if i > 0 && !reused {
			t.Fatalf("request %d opened a new connection; the parked one should have come back", i)
		}
		// Short answers carry their length, as net/http's do.
		if resp.ContentLength != int64(len(body)) || len(resp.TransferEncoding) != 0 {
			t.Fatalf("framing: Content-Length %d, Transfer-Encoding %v", resp.ContentLength, resp.TransferEncoding)
		}
		if resp.Header.Get("X-Request-Id") != "req-1" {
			t.Fatalf("a header set before parking was lost: %v", resp.Header)
		}
		if resp.Header.Get("Date") == "" || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" { // what net/http sniffs too
			t.Fatalf("Date %q, sniffed Content-Type %q", resp.Header.Get("Date"), resp.Header.Get("Content-Type"))
		}
	}
	waitParked(t, pk, 1) // the connection, idle, awaiting the next request
}

// waitParked waits until pk holds n connections (a parked connection
// finishes asynchronously after its client has read the answer).
func waitParked(t *testing.T, pk *Parker, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); pk.Parked() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("Parked() = %d; want %d", pk.Parked(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestStatusHeadersAndDeclaredLength(t *testing.T) {
	pk := New(0)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		body := `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Content-Length", fmt.Sprint(len(body)))
		rw.Header().Set("Retry-After", "1")
		rw.WriteHeader(529)
		rw.WriteHeader(200) // ignored, as in net/http
		rw.Write([]byte(body))
		if rw.Status() != 529 {
			t.Errorf("Status() = %d", rw.Status())
		}
	}))
	resp, body, _ := reusedPost(t, srv.Client(), srv.URL, "x")
	if resp.StatusCode != 529 || resp.Status != "529 status code 529" {
		t.Fatalf("status %q", resp.Status)
	}
	if resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "overloaded_error") || resp.ContentLength != int64(len(body)) {
		t.Fatalf("headers %v body %q", resp.Header, body)
	}
}

func TestLongAndFlushedAnswersAreChunked(t *testing.T) {
	pk := New(0)
	first := make(chan struct{})
	long := strings.Repeat("x", 10_000)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		if r.URL.Path == "/long" {
			rw.Write([]byte(long[:3000]))
			rw.Write([]byte(long[3000:]))
			return
		}
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.Write([]byte("event: one\ndata: {}\n\n"))
		rw.Flush()
		if rw.bw != nil {
			// A stream silent between bursts would hold it for nothing.
			t.Error("a flushed Response still holds its write buffer")
		}
		<-first // the client has read the first event before the second is written
		rw.Write([]byte("event: two\ndata: {}\n\n"))
	}))
	c := srv.Client()
	resp, body, _ := reusedPost(t, c, srv.URL+"/long", "x")
	if body != long || len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("long answer: %d bytes, Transfer-Encoding %v", len(body), resp.TransferEncoding)
	}

	resp, err := c.Post(srv.URL+"/stream", "application/json", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "event: one\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(first)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "data: {}\n\nevent: two\ndata: {}\n\n" {
		t.Fatalf("rest of the stream: %q, %v", rest, err)
	}
}

func TestClientLeavingCancelsTheParkedRequest(t *testing.T) {
	pk := New(0)
	cancelled := make(chan error, 1)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		<-rw.Context().Done()
		cancelled <- rw.Context().Err()
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := srv.Client().Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitParked(t, pk, 1)
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("context error %v", err)
	}
	<-done
	waitParked(t, pk, 0) // the connection is closed and forgotten
}

// rawExchange writes req on a fresh connection and returns everything the
// server sends until it closes the connection.
func rawExchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, b)
	}
	return string(b)
}

func TestConnectionCloseIsHonoured(t *testing.T) {
	pk := New(0)
	srv := startParked(t, pk, parkingHandler(pk, say("bye")))
	got := rawExchange(t, srv.Listener.Addr().String(),
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx")
	if !strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") || !strings.Contains(got, "\r\nConnection: close\r\n") || !strings.HasSuffix(got, "\r\n\r\nbye") {
		t.Fatalf("got %q", got)
	}
}

func TestPipelinedRequestsAreAnsweredInOrder(t *testing.T) {
	pk := New(0)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		if rw != nil {
			rw.Write([]byte("answer " + r.URL.Path))
		}
	}))
	one := "POST /one HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx"
	two := "POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx"
	got := rawExchange(t, srv.Listener.Addr().String(), one+two)
	i, j := strings.Index(got, "answer /one"), strings.Index(got, "answer /two")
	if i < 0 || j < i || strings.Count(got, "HTTP/1.1 200 OK") != 2 {
		t.Fatalf("got %q", got)
	}
}

func TestWhatCannotBeParkedIsServedInPlace(t *testing.T) {
	pk := New(0)
	defer pk.Shutdown(context.Background())
	var parked atomic.Bool
	h := parkingHandler(pk, func(rw *Response, r *http.Request) { parked.Store(rw != nil) })
	// A server whose listener is not pk's.
	plain := httptest.NewServer(h)
	defer plain.Close()
	resp, _, _ := reusedPost(t, plain.Client(), plain.URL, "x")
	if resp.Header.Get("X-Parked") != "no" || parked.Load() {
		t.Fatal("a connection from a foreign listener was parked")
	}
	// HTTP/1.0 through pk's listener.
	srv := startParked(t, pk, h)
	got := rawExchange(t, srv.Listener.Addr().String(), "POST / HTTP/1.0\r\nContent-Length: 1\r\n\r\nx")
	if !strings.Contains(got, "X-Parked: no") {
		t.Fatalf("HTTP/1.0 was parked: %q", got)
	}
	// HTTP/1.1 through it is parked.
	reusedPost(t, srv.Client(), srv.URL, "x")
	if !parked.Load() {
		t.Fatal("an HTTP/1.1 request through the listener was not parked")
	}
}

func TestShortAnswerClosesTheConnection(t *testing.T) {
	pk := New(0)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		rw.Header().Set("Content-Length", "10")
		rw.Write([]byte("12345")) // the upstream broke off, say
	}))
	got := rawExchange(t, srv.Listener.Addr().String(), "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
	if !strings.HasSuffix(got, "\r\n\r\n12345") {
		t.Fatalf("got %q", got) // and rawExchange returned: the connection was closed
	}
}

// httptestRequest is an HTTP/1.1 request as a Listener's connection would
// carry it.
func httptestRequest() *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("x"))
	return r
}

// slowStuckOrQuick is the answer of the Shutdown tests: /slow once release
// is closed, /stuck only when its context ends (the error goes to cut),
// anything else at once.
func slowStuckOrQuick(release <-chan struct{}, cut chan<- error) answer {
	return func(rw *Response, r *http.Request) {
		switch r.URL.Path {
		case "/slow": // finishes when released, during the shutdown
			<-release
			rw.Write([]byte("late but whole"))
		case "/stuck": // never finishes on its own
			<-rw.Context().Done()
			cut <- rw.Context().Err()
		default:
			rw.Write([]byte("quick"))
		}
	}
}

// result is what a client got for a request posted in the background.
type result struct {
	resp *http.Response
	body string
	err  error
}

// postInBackground posts to url and delivers what came back.
func postInBackground(c *http.Client, url string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := c.Post(url, "text/plain", strings.NewReader("x"))
		if err != nil {
			ch <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- result{resp, string(b), err}
	}()
	return ch
}
