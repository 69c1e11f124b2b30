package proxy

// Helpers for the tests that talk HTTP over real loopback sockets, byte by
// byte: they poll against generous bounds and assert no timing.

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
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

// wantConnRefused dials addr and wants the 429 of a connection past
// MAX_PENDING_CONNS.
func wantConnRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, body := readAnswer(t, c, bufio.NewReader(c))
	wantErrorAnswer(t, resp, body, 429, "rate_limit_error", "MAX_PENDING_CONNS")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("the refused connection's 429 has no retry-after")
	}
}
