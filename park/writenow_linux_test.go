package park

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// dialRaw opens a connection to addr and sends req on it.
func dialRaw(t *testing.T, addr, req string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	tc := c.(*net.TCPConn)
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return tc
}

const streamRequest = "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"

// WriteNow sends the status, the headers and each piece at once, chunked,
// from the caller's goroutine: the client reads the first event while the
// handler still waits to send the second.
func TestWriteNowSendsEachPieceAtOnce(t *testing.T) {
	pk := New(0)
	next := make(chan struct{})
	taken := make(chan []bool, 1)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(http.StatusOK)
		var oks []bool
		oks = append(oks, rw.WriteNow(nil), rw.WriteNow([]byte("event: a\n\n")))
		<-next
		oks = append(oks, rw.WriteNow([]byte("event: b\n\n")), rw.Owes() > 0)
		taken <- oks
	}))
	c := dialRaw(t, srv.Listener.Addr().String(), streamRequest)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get("X-Request-Id") != "req-1" {
		t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
	}
	if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
		t.Fatalf("transfer encoding %v; want chunked", resp.TransferEncoding)
	}
	first := make([]byte, len("event: a\n\n"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "event: a\n\n" {
		t.Fatalf("first event %q, %v", first, err)
	}
	close(next)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "event: b\n\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if oks := <-taken; fmt.Sprint(oks) != "[true true true false]" {
		t.Fatalf("WriteNow(nil), WriteNow(a), WriteNow(b), Owes = %v; want [true true true false]", oks)
	}
}

// A client that reads nothing: WriteNow takes pieces while the socket
// does, keeps what it did not take of the last one (Owes), and then
// declines, sending nothing; Flush and Write send the rest in order once
// the client reads. Not a byte is lost or sent twice.
func TestWriteNowOwesWhatTheSocketDidNotTake(t *testing.T) {
	pk := New(0)
	type outcome struct {
		sent     []byte // what the client must receive, in order
		owed     bool   // a piece was taken in part
		declined bool
		err      error
	}
	done := make(chan outcome, 1)
	full := make(chan struct{})
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		var o outcome
		defer func() { done <- o }()
		defer func() {
			if !o.declined {
				close(full)
			}
		}()
		rw.WriteHeader(http.StatusOK)
		if !rw.WriteNow(nil) {
			o.err = fmt.Errorf("WriteNow(nil) declined on a fresh connection")
			return
		}
		for i := 0; i < 4000 && !o.declined; i++ { // 32 MB at most: past the socket's buffers
			piece := bytes.Repeat([]byte{byte('a' + i%26)}, 8<<10)
			if rw.WriteNow(piece) {
				o.sent = append(o.sent, piece...)
				o.owed = o.owed || rw.Owes() > 0
				continue
			}
			o.declined = true
			close(full) // the client reads from here on
			// Written the usual way, under a deadline: after what is owed.
			rw.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := rw.Write(piece); err != nil {
				o.err = err
				return
			}
			o.sent = append(o.sent, piece...)
			o.err = rw.FlushError()
		}
	}))
	c := dialRaw(t, srv.Listener.Addr().String(), streamRequest)
	<-full
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read: %v after %d bytes", err, len(got))
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if !o.declined {
		t.Fatal("WriteNow never declined: the socket never filled")
	}
	if !bytes.Equal(got, o.sent) {
		t.Fatalf("client got %d bytes, handler sent %d; they differ", len(got), len(o.sent))
	}
	t.Logf("%d KB relayed, a piece taken in part: %v", len(got)>>10, o.owed)
}

// A write deadline already passed (a cut): WriteNow sends nothing, and
// the usual write reports the timeout.
func TestWriteNowAfterACutSendsNothing(t *testing.T) {
	pk := New(0)
	got := make(chan string, 1)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		rw.WriteHeader(http.StatusOK)
		ok1 := rw.WriteNow(nil)
		rw.SetWriteDeadline(time.Unix(1, 0))
		ok2 := rw.WriteNow([]byte("event: a\n\n"))
		_, err := rw.Write([]byte("event: a\n\n"))
		if err == nil {
			err = rw.FlushError()
		}
		got <- fmt.Sprint(ok1, ok2, err != nil && strings.Contains(err.Error(), "timeout"))
	}))
	c := dialRaw(t, srv.Listener.Addr().String(), streamRequest)
	io.ReadAll(c)
	if g := <-got; g != "true false true" {
		t.Fatalf("WriteNow(nil), WriteNow after the cut, the write timed out = %s; want true false true", g)
	}
}

// An answer with a declared length is not chunked: WriteNow declines it,
// and Write sends it as usual.
func TestWriteNowDeclinesADeclaredLength(t *testing.T) {
	pk := New(0)
	srv := startParked(t, pk, parkingHandler(pk, func(rw *Response, r *http.Request) {
		rw.Header().Set("Content-Length", "5")
		rw.WriteHeader(http.StatusOK)
		if rw.WriteNow([]byte("hello")) {
			rw.Header().Set("X-Bad", "1") // too late to be seen: the body check below fails instead
			return
		}
		rw.Write([]byte("hello"))
	}))
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "hello" || resp.ContentLength != 5 {
		t.Fatalf("body %q, length %d; want hello, 5", b, resp.ContentLength)
	}
}
