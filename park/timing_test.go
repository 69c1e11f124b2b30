package park

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/internal/memnet"
)

// bubble serves h through pk's Listener on an in-memory network; call it
// inside synctest.Test.
func bubble(t *testing.T, pk *Parker, h http.Handler) *http.Client {
	t.Helper()
	ln := memnet.NewListener()
	srv := &http.Server{Handler: h}
	go srv.Serve(pk.Listener(ln))
	tr := &http.Transport{DialContext: ln.Dial}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		pk.Shutdown(context.Background())
	})
	return &http.Client{Transport: tr}
}

func postOK(t *testing.T, c *http.Client, path string) *http.Response {
	t.Helper()
	resp, err := c.Post("http://parked.test"+path, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestIdleParkedConnectionIsClosedAfterTheIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pk := New(time.Minute)
		c := bubble(t, pk, parkingHandler(pk, say("ok")))
		postOK(t, c, "/")
		synctest.Wait()
		if pk.Parked() != 1 {
			t.Fatalf("after the answer: Parked() = %d; want 1 (idle, awaiting the next request)", pk.Parked())
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if pk.Parked() != 1 {
			t.Fatal("closed before the idle timeout")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if pk.Parked() != 0 {
			t.Fatal("still open after the idle timeout")
		}
	})
}

func TestHandedBackConnectionKeepsNoStaleDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pk := New(time.Hour)
		h := parkingHandler(pk, func(rw *Response, r *http.Request) {
			if rw == nil {
				return
			}
			rw.SetWriteDeadline(time.Now().Add(time.Second)) // as the proxy does for a slow reader
			rw.Write([]byte("parked"))
		})
		mux := http.NewServeMux()
		mux.Handle("POST /", h)
		mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "in place") })
		c := bubble(t, pk, mux)
		postOK(t, c, "/")
		time.Sleep(10 * time.Second) // long past the parked answer's write deadline
		resp, err := c.Get("http://parked.test/")
		if err != nil {
			t.Fatalf("the next request on the handed-back connection: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "in place" {
			t.Fatalf("got %q", b)
		}
	})
}

func TestShutdownClosesIdleFinishesActiveAndCutsTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pk := New(time.Hour)
		release := make(chan struct{})
		var released sync.Once
		defer released.Do(func() { close(release) }) // a failed test must not strand the handler
		cut := make(chan error, 1)
		h := parkingHandler(pk, slowStuckOrQuick(release, cut))
		c := bubble(t, pk, h)
		slow, stuck := postInBackground(c, "http://parked.test/slow"), postInBackground(c, "http://parked.test/stuck")
		synctest.Wait()
		postOK(t, c, "/") // a third connection, idle once answered
		synctest.Wait()
		if pk.Parked() != 3 {
			t.Fatalf("Parked() = %d; want 3 (one idle, two answering)", pk.Parked())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- pk.Shutdown(ctx) }()
		synctest.Wait()
		if pk.Parked() != 2 {
			t.Fatalf("Parked() = %d after Shutdown began; want 2 (the idle one closed)", pk.Parked())
		}
		released.Do(func() { close(release) })
		r := <-slow
		if r.err != nil || r.body != "late but whole" || !r.resp.Close {
			t.Fatalf("the answer finished during shutdown: %+v (want it whole, with Connection: close)", r)
		}
		start := time.Now()
		if err := <-shut; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v; want the deadline it had to cut at", err)
		}
		if waited := time.Since(start); waited != 30*time.Second {
			t.Fatalf("Shutdown cut after %v; want 30s", waited)
		}
		if err := <-cut; !errors.Is(err, context.Canceled) {
			t.Fatalf("the cut request's context: %v", err)
		}
		if r := <-stuck; r.err == nil {
			t.Fatalf("the cut request's client got %+v; want an error", r)
		}
		if _, err := pk.Park(nil, httptestRequest()); !errors.Is(err, ErrNotParkable) {
			t.Fatalf("Park after Shutdown: %v", err)
		}
	})
}

// Shutdown closes the connections it finds idle and leaves the others to
// close after their answers. An answer whose headers went out (keep-alive)
// before Shutdown began, and which completes after Shutdown looked for
// idle connections, must close its connection too, rather than go idle:
// else Shutdown waits for it until its deadline and cuts it then.
func TestShutdownClosesAnAnswerCompletingAsItBegins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pk := New(time.Hour)
		release := make(chan struct{})
		ln := memnet.NewListener()
		srv := &http.Server{Handler: parkingHandler(pk, func(rw *Response, r *http.Request) {
			<-release
			rw.Write([]byte("ok"))
		})}
		go srv.Serve(pk.Listener(ln))
		t.Cleanup(func() { srv.Close() })
		c, err := ln.Dial(context.Background(), "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		go io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx")
		synctest.Wait()
		if pk.Parked() != 1 {
			t.Fatalf("Parked() = %d; want 1", pk.Parked())
		}
		close(release)
		// Finish has sent the headers, keep-alive, and blocks writing them
		// to the pipe: the client is not reading yet.
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shut := make(chan error, 1)
		begun := time.Now()
		go func() { shut <- pk.Shutdown(ctx) }()
		synctest.Wait() // Shutdown found nothing idle, and waits
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
			t.Fatalf("the answer: %q, %v", b, err)
		}
		synctest.Wait()
		select {
		case err := <-shut:
			if err != nil {
				t.Fatalf("Shutdown = %v; want nil: the answer completed", err)
			}
		default:
			t.Error("Shutdown still waits, for a connection whose answer is complete")
			t.Errorf("Shutdown = %v after %v", <-shut, time.Since(begun))
			return
		}
		if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
			t.Fatalf("after the answer: %q, %v; want the connection closed", rest, err)
		}
	})
}

// slowCloseListener's connections take a second to close, during which the
// rest of the bubble runs: whatever is written to a connection before its
// Close is called reaches the client.
type slowCloseListener struct{ net.Listener }

func (l slowCloseListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return slowCloseConn{c}, nil
}

type slowCloseConn struct{ net.Conn }

func (c slowCloseConn) Close() error {
	time.Sleep(time.Second)
	return c.Conn.Close()
}

// A request that Shutdown cuts gets no answer: its connection is closed
// before its context is cancelled, so that what its handler does then (here,
// as the proxy does for a cancelled request, Finish with nothing written: an
// empty 200) cannot reach the client as if it were the answer.
func TestShutdownCutsBeforeTheHandlerCanAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pk := New(time.Hour)
		ln := memnet.NewListener()
		srv := &http.Server{Handler: parkingHandler(pk, func(rw *Response, r *http.Request) {
			<-rw.Context().Done()
		})}
		go srv.Serve(pk.Listener(slowCloseListener{ln}))
		tr := &http.Transport{DialContext: ln.Dial}
		t.Cleanup(func() {
			tr.CloseIdleConnections()
			srv.Close()
		})
		type result struct {
			resp *http.Response
			err  error
		}
		got := make(chan result, 1)
		go func() {
			resp, err := (&http.Client{Transport: tr}).Post("http://parked.test/", "text/plain", strings.NewReader("x"))
			if err == nil {
				resp.Body.Close()
			}
			got <- result{resp, err}
		}()
		synctest.Wait()
		if pk.Parked() != 1 {
			t.Fatalf("Parked() = %d; want 1", pk.Parked())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := pk.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v; want the deadline it had to cut at", err)
		}
		if r := <-got; r.err == nil {
			t.Fatalf("the cut request's client got an answer, %s; want the connection cut", r.resp.Status)
		}
	})
}
