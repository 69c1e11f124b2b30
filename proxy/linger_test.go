package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// A client that sends its whole body before it reads (as an HTTP/1.1
// client may) gets sluice's refusal, not a connection reset: sluice reads
// and discards what is left of a refused body, within lingerBytes and
// lingerTime, before it closes. Without that, the unread bytes make the
// kernel reset the connection, which throws away the 429 the client has
// not read yet; issue 23's forty 30 MB clients saw it as a reset now and
// then.
func TestRefusedBodyIsDrainedSoTheClientReadsTheRefusal(t *testing.T) {
	up := startUpstream(t, apiHandler)
	_, px := startProxyWith(t, testConfig(t, up.URL, true, func(c *config.Config) { c.BodyBudget = 1 << 20 }), Options{})
	const size = 24 << 20 // past the budget, within the size limit: refused on its headers
	head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d", size)
	conn := rawRequest(t, px.Listener.Addr().String(), head, "")
	// Wait past Go's own half-second wait before it closes, so that the
	// body arrives when only sluice's drain can take it.
	time.Sleep(700 * time.Millisecond)
	conn.SetWriteDeadline(time.Now().Add(20 * time.Second))
	chunk := []byte(strings.Repeat("x", 64<<10))
	for sent := 0; sent < size; sent += len(chunk) {
		if _, err := conn.Write(chunk); err != nil {
			t.Fatalf("sending the body after %d bytes: %v", sent, err)
		}
	}
	resp, body := readAnswer(t, conn, bufio.NewReader(conn))
	wantErrorAnswer(t, resp, body, 429, "rate_limit_error", "BODY_BUDGET_MB")
	waitForServerLinger()
}

// The drain is bounded in time: a client that sends nothing after its
// refused headers is let go after lingerTime.
func TestRefusedBodyDrainIsBounded(t *testing.T) {
	up := startUpstream(t, apiHandler)
	_, px := startProxyWith(t, testConfig(t, up.URL, true, func(c *config.Config) { c.BodyBudget = 1 << 20 }), Options{})
	head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d", 24<<20)
	conn := rawRequest(t, px.Listener.Addr().String(), head, "")
	start := time.Now()
	conn.SetReadDeadline(time.Now().Add(lingerTime + 10*time.Second))
	n, err := io.Copy(io.Discard, conn)
	if took := time.Since(start); took > lingerTime+5*time.Second {
		t.Errorf("a client that sent nothing after its headers was held %v after its refusal; want about lingerTime (%v)", took, lingerTime)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("sluice never closed the connection (read %d bytes)", n)
	}
	waitForServerLinger()
}

// A connection being drained counts against MAX_PENDING_CONNS, as one
// sending its request does: with the bound taken by drains, a refused
// body is not drained (the connection is closed at once), so refusals
// cannot hold more connections than the bound.
func TestRefusedBodyDrainsCountAgainstPendingConns(t *testing.T) {
	up := startUpstream(t, apiHandler)
	p, px := startProxyWith(t, testConfig(t, up.URL, true, func(c *config.Config) {
		c.BodyBudget = 1 << 20
		c.MaxPendingConns = 4
	}), Options{})
	head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d", 24<<20)
	var conns []net.Conn
	for range 8 {
		// Refused on its headers, then drained; or, once drains hold
		// the bound, refused as a connection past MAX_PENDING_CONNS.
		c := rawRequest(t, px.Listener.Addr().String(), head, "x")
		resp, body := readAnswer(t, c, bufio.NewReader(c))
		wantErrorAnswer(t, resp, body, 429, "rate_limit_error", "")
		conns = append(conns, c)
	}
	if n := p.pendingConns.n.Load(); n > 4 {
		t.Errorf("%d connections counted with eight refused bodies being drained; the bound is 4", n)
	}
	// The drains past the bound were not started: those connections are
	// closed already, well before lingerTime.
	var closed atomic.Int32
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(deadline)
			if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
				closed.Add(1)
			}
		})
	}
	wg.Wait()
	if closed.Load() < 4 {
		t.Errorf("%d of eight drained connections closed within a second; want at least the four past the bound", closed.Load())
	}
	waitForServerLinger()
}

// A client that asked to be told to go on (Expect: 100-continue) and was
// refused instead sends no body: nothing is drained, and the connection
// closes at once.
func TestRefusedExpectContinueIsNotDrained(t *testing.T) {
	up := startUpstream(t, apiHandler)
	_, px := startProxyWith(t, testConfig(t, up.URL, true, func(c *config.Config) { c.BodyBudget = 1 << 20 }), Options{})
	head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d", 24<<20)
	conn := rawRequest(t, px.Listener.Addr().String(), head, "")
	start := time.Now()
	resp, body := readAnswer(t, conn, bufio.NewReader(conn))
	wantErrorAnswer(t, resp, body, 429, "rate_limit_error", "BODY_BUDGET_MB")
	conn.SetReadDeadline(time.Now().Add(lingerTime + 5*time.Second))
	io.Copy(io.Discard, conn)
	if took := time.Since(start); took > lingerTime {
		t.Errorf("a refused Expect: 100-continue request was held %v; want it closed at once, not drained for lingerTime (%v)", took, lingerTime)
	}
	waitForServerLinger()
}
