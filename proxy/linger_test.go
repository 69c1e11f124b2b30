package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
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
