package park

import (
	"context"
	"errors"
	"io"
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
		h := parkingHandler(pk, func(rw *Response, r *http.Request) {
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
		})
		c := bubble(t, pk, h)
		type result struct {
			resp *http.Response
			body string
			err  error
		}
		slow, stuck := make(chan result, 1), make(chan result, 1)
		for path, ch := range map[string]chan result{"/slow": slow, "/stuck": stuck} {
			go func() {
				resp, err := c.Post("http://parked.test"+path, "text/plain", strings.NewReader("x"))
				if err != nil {
					ch <- result{err: err}
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				ch <- result{resp, string(b), err}
			}()
		}
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
