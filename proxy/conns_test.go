package proxy

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// keptAlive is a client connection that has been answered once and now
// sits idle between requests.
type keptAlive struct {
	c  net.Conn
	br *bufio.Reader
}

// dialKeptAlive opens a connection, has one request answered on it, and
// leaves it idle.
func dialKeptAlive(t *testing.T, addr string) keptAlive {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	k := keptAlive{c, bufio.NewReader(c)}
	k.get(t)
	return k
}

// get asks for /healthz on k and wants a 200.
func (k keptAlive) get(t *testing.T) {
	t.Helper()
	io.WriteString(k.c, "GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
	if resp, body := readAnswer(t, k.c, k.br); resp.StatusCode != 200 {
		t.Fatalf("healthz: %d %s", resp.StatusCode, body)
	}
}

// closedByServer reports whether the server has closed k: a read finds
// EOF (or a reset) rather than waiting.
func (k keptAlive) closedByServer() bool {
	k.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := k.br.Peek(1)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// With MAX_PENDING_CONNS connections idle between requests, a new client
// is served, not refused: the connection idle longest is closed to make
// room for it (its client reconnects, as after IdleTimeout). The others
// stay open.
func TestNewClientIsAdmittedPastIdleKeepAliveConnections(t *testing.T) {
	up := startUpstream(t, apiHandler)
	p, px := startProxyWith(t, testConfig(t, up.URL, false, func(c *config.Config) { c.MaxPendingConns = 8 }), Options{})
	addr := px.Listener.Addr().String()
	// A connection is counted again, and put in the idle list, by the
	// server's goroutine after its answer is written, which the client
	// can read first: wait for the count, so that the list's order is
	// the order of the dials.
	counted := func(n int64) func() bool { return func() bool { return p.pendingConns.n.Load() == n } }
	var idle []keptAlive
	for i := range 8 {
		idle = append(idle, dialKeptAlive(t, addr))
		eventually(t, fmt.Sprintf("%d idle connections counted", i+1), counted(int64(i+1)))
	}

	for round := range 3 {
		fresh := dialKeptAlive(t, addr) // refused with 529 before the fix
		eventually(t, "the new connection counted as idle", counted(8))
		eventually(t, "the oldest idle connection closed", func() bool { return idle[round].closedByServer() })
		if p.pendingConns.n.Load() > 8 {
			t.Fatalf("%d connections counted; the bound is 8", p.pendingConns.n.Load())
		}
		idle = append(idle, fresh)
	}
	// The others were left alone, and serve their next request.
	for _, k := range idle[3:] {
		if k.closedByServer() {
			t.Fatal("a connection idle for less long was closed")
		}
	}
	idle[3].get(t)
	r := post(t, "http://"+addr, "/v1/messages", requestJSON)
	if r.StatusCode != 200 {
		t.Fatalf("a request on a new connection: %d", r.StatusCode)
	}
}

// Connections that are sending (new ones that have sent part of a
// request, or idle ones halfway through their next) are not idle: they
// cannot be closed to make room, so the bound still holds against a
// slowloris, whichever way it comes.
func TestSlowSendersStillHoldTheBound(t *testing.T) {
	up := startUpstream(t, apiHandler)
	p, px := startProxyWith(t, testConfig(t, up.URL, false, func(c *config.Config) { c.MaxPendingConns = 8 }), Options{})
	addr := px.Listener.Addr().String()

	// One idle connection, then seven that send slowly, four of them new
	// and three kept alive and halfway through their next request.
	spare := dialKeptAlive(t, addr)
	var slow []net.Conn
	for i := range 7 {
		if i < 4 {
			c := rawDial(t, addr)
			io.WriteString(c, "POST /v1/messages HTTP/1.1\r\nHost: sl")
			slow = append(slow, c)
			continue
		}
		k := dialKeptAlive(t, addr)
		io.WriteString(k.c, "GET /healthz HTTP/1.1\r\nHost: sl")
		slow = append(slow, k.c)
	}
	eventually(t, "8 connections counted", func() bool { return p.pendingConns.n.Load() == 8 })

	// The idle one makes room for one new client; then, once that one
	// sends slowly too, nothing can.
	fresh := dialKeptAlive(t, addr)
	eventually(t, "the idle connection closed", spare.closedByServer)
	io.WriteString(fresh.c, "GET /healthz HTTP/1.1\r\nHost: sl")
	slow = append(slow, fresh.c)
	// Until the bytes just written are in sluice's socket (the kernel may
	// deliver them on loopback a moment later on a loaded machine), fresh
	// looks idle, and a new client would take its place.
	for _, c := range slow {
		eventually(t, "a slow sender's bytes delivered", func() bool { return delivered(c) })
	}
	for range 3 {
		wantConnRefused(t, addr)
	}
	for _, c := range slow {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
			t.Fatalf("a slow sender's connection was answered or closed: %v", err)
		}
	}
}

func rawDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A request parked while it waits for its answer is not idle: filling
// the bound with idle connections and admitting new ones past them never
// closes it, and it gets its answer.
func TestParkedRequestIsNotClosedToAdmitANewClient(t *testing.T) {
	release := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-release
		writeMessage(w)
	})
	p, px := startProxyWith(t, testConfig(t, up.URL, true, func(c *config.Config) { c.MaxPendingConns = 4 }), Options{})
	addr := px.Listener.Addr().String()
	waiting := rawRequest(t, addr, "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nX-Api-Key: sk-test\r\nAnthropic-Version: 2023-06-01\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(requestJSON)), requestJSON)
	eventually(t, "the request parked", func() bool { return p.parker.Parked() == 1 })
	var idle []keptAlive
	for range 4 {
		idle = append(idle, dialKeptAlive(t, addr))
	}
	for range 4 {
		dialKeptAlive(t, addr)
	}
	close(release)
	if resp, body := readAnswer(t, waiting, bufio.NewReader(waiting)); resp.StatusCode != 200 {
		t.Fatalf("the parked request: %d %s", resp.StatusCode, body)
	}
}

// MAX_PENDING_CONNS is capped to fit the file limit, keeping descriptors
// for the admin listener, the requests being served and their upstream
// connections; under a limit of 256 the default 4,096 let accept fail,
// and every client hung, /metrics too.
func TestPendingBoundIsCappedByTheFileLimit(t *testing.T) {
	for _, tc := range []struct {
		want   int
		nofile uint64
		got    int
		capped bool
	}{
		{4096, 256, 96, true},
		{4096, 1024, 480, true},
		{4096, 1 << 20, 4096, false},
		{4096, 0, 4096, false}, // unknown
		{8, 256, 8, false},
		{4096, 100, 1, true},
	} {
		got, capped := capPending(tc.want, tc.nofile)
		if got != tc.got || capped != tc.capped {
			t.Errorf("capPending(%d, %d) = %d, %v; want %d, %v", tc.want, tc.nofile, got, capped, tc.got, tc.capped)
		}
	}

	// And Serve applies it, saying so.
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skip("no RLIMIT_NOFILE here")
	}
	low := rl
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	var logged strings.Builder
	p, err := newProxy(t, testConfig(t, "http://127.0.0.1:1", false), Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := (&Server{Proxy: p, Log: slog.New(slog.NewTextHandler(&logged, nil))}).Start(ln)
	addr := ln.Addr().String()
	dialKeptAlive(t, addr) // served: Serve has begun
	stop()
	if p.cfg.MaxPendingConns != 96 || !strings.Contains(logged.String(), "capped_to=96") {
		t.Fatalf("MAX_PENDING_CONNS %d under a file limit of 256; log: %s", p.cfg.MaxPendingConns, logged.String())
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
