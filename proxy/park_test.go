package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// heldUpstream answers like the API, but holds its first call until
// release is called; holding is closed when that call arrives.
func heldUpstream(t *testing.T) (up string, holding <-chan struct{}, release func()) {
	t.Helper()
	h, r := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	srv := startUpstream(t, func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		if calls.Add(1) == 1 {
			close(h)
			<-r
		}
		writeMessage(w)
	})
	var once sync.Once
	return srv.URL, h, func() { once.Do(func() { close(r) }) }
}

// waitFor fails t unless ch is closed within 10s.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

type tracedAnswer struct {
	resp *http.Response
	body string
	conn httptrace.GotConnInfo
	err  error
}

// tracedPost sends a Messages request with the SDK's headers through c,
// and says which connection carried it.
func tracedPost(c *http.Client, url string) tracedAnswer {
	var a tracedAnswer
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { a.conn = i }})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/messages", strings.NewReader(requestJSON))
	if err != nil {
		a.err = err
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-test")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := c.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a.resp, a.body, a.err = resp, string(b), err
	return a
}

// checkAnswer checks a relayed Messages answer: the upstream's body byte
// for byte, its request-id, and sluice's own id.
func checkAnswer(t *testing.T, which string, a tracedAnswer) {
	t.Helper()
	if a.err != nil {
		t.Fatalf("%s: %v", which, a.err)
	}
	if a.resp.StatusCode != 200 {
		t.Errorf("%s: status = %d; want 200", which, a.resp.StatusCode)
	}
	if a.body != messageJSON {
		t.Errorf("%s: body = %q; want %q", which, a.body, messageJSON)
	}
	if got := a.resp.Header.Get("Request-Id"); got != "req_upstream_1" {
		t.Errorf("%s: Request-Id = %q; want %q", which, got, "req_upstream_1")
	}
	if got := a.resp.Header.Get(sluiceIDHeader); !strings.HasPrefix(got, "req_sluice_") {
		t.Errorf("%s: %s = %q; want sluice's request id", which, sluiceIDHeader, got)
	}
}

func TestWindowedRequestIsParkedAndItsConnectionComesBack(t *testing.T) {
	up, holding, release := heldUpstream(t)
	p, px := startProxy(t, testConfig(t, up, true))
	t.Cleanup(release) // after startProxy's, so before it: Shutdown waits for the held answer
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}

	first := make(chan tracedAnswer, 1)
	go func() { first <- tracedPost(c, px.URL) }()
	waitFor(t, holding, "the upstream call")
	if n := p.parker.Parked(); n != 1 {
		t.Fatalf("while the upstream holds the call: Parked() = %d; want 1", n)
	}
	// Scraped over another client's connection, served in place.
	mc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(mc.CloseIdleConnections)
	resp, err := mc.Get(px.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text := readAll(t, resp.Body)
	resp.Body.Close()
	if want := "sluice_parked_connections 1\n"; !strings.Contains(text, want) {
		t.Errorf("/metrics lacks %q", want)
	}

	release()
	a := <-first
	checkAnswer(t, "first answer", a)
	b := tracedPost(c, px.URL)
	checkAnswer(t, "second answer", b)
	if !b.conn.Reused {
		t.Fatal("the second request opened a new connection; the parked one should have come back")
	}
	if got, want := b.conn.Conn.LocalAddr().String(), a.conn.Conn.LocalAddr().String(); got != want {
		t.Fatalf("the second request went over %s; want the first's, %s", got, want)
	}
	if a.resp.Header.Get(sluiceIDHeader) == b.resp.Header.Get(sluiceIDHeader) {
		t.Errorf("both answers carry %s %q; want one per request", sluiceIDHeader, a.resp.Header.Get(sluiceIDHeader))
	}
}

func TestHTTP10WindowedRequestIsServedInPlace(t *testing.T) {
	up, holding, release := heldUpstream(t)
	p, px := startProxy(t, testConfig(t, up, true))
	t.Cleanup(release)
	c, err := net.Dial("tcp", px.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /v1/messages HTTP/1.0\r\nHost: sluice\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\n"+
		"Anthropic-Version: 2023-06-01\r\nContent-Length: %d\r\n\r\n%s", len(requestJSON), requestJSON)
	waitFor(t, holding, "the upstream call")
	if n := p.parker.Parked(); n != 0 {
		t.Fatalf("while the upstream holds the call: Parked() = %d; want 0 (HTTP/1.0 waits in place)", n)
	}
	release()
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	resp.Body.Close()
	checkAnswer(t, "HTTP/1.0 answer", tracedAnswer{resp: resp, body: body})
	if resp.Proto != "HTTP/1.0" { // net/http answers in kind; a parked answer would say HTTP/1.1
		t.Errorf("answered as %s; want HTTP/1.0, from net/http in place", resp.Proto)
	}
	// Without keep-alive, HTTP/1.0's connection ends with the answer.
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the answer: %q, %v; want the connection closed", rest, err)
	}
}

// By default a windowed request is parked only when BATCH_MAX_CONCURRENCY
// requests are already waiting: one that will get its slot soon is not
// worth the takeover.
func TestParkingStartsWhenTheCapIsWaiting(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		calls.Add(1)
		<-release
		writeMessage(w)
	})
	// the default threshold: 2 waiting
	p, srv := startDefaultParking(t, testConfig(t, up.URL, true, func(c *config.Config) { c.MaxConcurrency, c.MaxSize = 2, 1 }))
	defer close(release)

	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0}}
	defer c.CloseIdleConnections()
	answers := make(chan tracedAnswer, 5)
	send := func() { go func() { answers <- tracedPost(c, srv.URL) }() }
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (queued %d, parked %d, upstream calls %d)", what, p.Queued(), p.parker.Parked(), calls.Load())
			}
		}
	}
	for range 2 { // both get a slot at once: nobody is waiting
		send()
	}
	waitUntil("two calls upstream", func() bool { return calls.Load() == 2 })
	for i := 1; i <= 2; i++ { // in line for a slot, with fewer than 2 ahead
		send()
		waitUntil(fmt.Sprint(i, " waiting"), func() bool { return p.Queued() == i })
	}
	if n := p.parker.Parked(); n != 0 {
		t.Fatalf("Parked() = %d with fewer than 2 waiting ahead; want 0", n)
	}
	send() // 2 waiting ahead of it: parked
	waitUntil("the fifth parked", func() bool { return p.parker.Parked() == 1 })
	if q := p.Queued(); q != 3 {
		t.Fatalf("Queued() = %d; want 3", q)
	}
}

// A stream's connection is taken over (package park) even with nothing
// waiting ahead of it, on either path: an agent's stream stays open, silent
// most of the time, for as long as its answer takes, and taken over it
// holds none of net/http's buffers and background read meanwhile. Its
// events arrive whole and in order, and a silent client leaving still ends
// the upstream call.
func TestStreamConnectionIsTakenOverWithNothingWaiting(t *testing.T) {
	for _, windowed := range []bool{false, true} {
		t.Run(fmt.Sprint("windowed=", windowed), func(t *testing.T) {
			release := make(chan struct{})
			upstreamGone := make(chan struct{})
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				for i, ev := range sseEvents {
					if i == 3 {
						select { // silent, as a model thinking
						case <-release:
						case <-r.Context().Done():
							close(upstreamGone)
							return
						}
					}
					io.WriteString(w, ev)
					w.(http.Flusher).Flush()
				}
			})
			p, srv := startDefaultParking(t, testConfig(t, up.URL, windowed))
			var once sync.Once
			open := func() { once.Do(func() { close(release) }) }
			defer open()

			for round := range 2 {
				resp := post(t, srv.URL, "/v1/messages", streamRequestJSON)
				br := bufio.NewReader(resp.Body)
				for i := range 3 {
					if ev := readEvent(t, br); ev != sseEvents[i] {
						t.Fatalf("event %d: %q; want %q", i, ev, sseEvents[i])
					}
				}
				if n := p.parker.Parked(); n != 1 {
					t.Fatalf("while the stream is silent: Parked() = %d; want its connection taken over", n)
				}
				if round == 1 { // the client leaves during the silence
					resp.Body.Close()
					waitFor(t, upstreamGone, "the upstream call to end once the client left")
					return
				}
				open()
				rest, err := io.ReadAll(br)
				resp.Body.Close()
				if want := strings.Join(sseEvents[3:], ""); err != nil || string(rest) != want {
					t.Fatalf("the rest of the stream: %q, %v; want %q", rest, err, want)
				}
				release = make(chan struct{})
				once = sync.Once{}
			}
		})
	}
}

// startDefaultParking serves a proxy for cfg through its Listener, with
// the default threshold for parking (unlike startProxy's, which parks
// every windowed request).
func startDefaultParking(t *testing.T, cfg config.Config) (*Proxy, *httptest.Server) {
	t.Helper()
	p, err := newProxy(t, cfg, Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(p)
	srv.Listener = p.Listener(srv.Listener)
	srv.Start()
	t.Cleanup(func() { srv.Close(); p.Shutdown(context.Background()); p.Close() })
	return p, srv
}
