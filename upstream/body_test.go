package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"
	"weak"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A Body reads whole until it is released; from then a read gets
// ErrBodyReleased, or io.EOF at the end, and no pass can be reopened.
func TestBodyReadsUntilReleased(t *testing.T) {
	data := []byte("0123456789")
	b := NewBody(data)
	if got, err := io.ReadAll(b.Reader()); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a pass read %q, %v", got, err)
	}
	r, err := b.reopen()
	if err != nil {
		t.Fatal(err)
	}
	done := b.Reader()
	io.Copy(io.Discard, done)
	half := make([]byte, 4)
	if n, err := r.Read(half); n != 4 || err != nil {
		t.Fatalf("read %d, %v", n, err)
	}
	b.Release()
	b.Release() // twice is once
	if n, err := r.Read(half); n != 0 || !errors.Is(err, ErrBodyReleased) {
		t.Errorf("a pass half read after Release: %d, %v; want 0, ErrBodyReleased", n, err)
	}
	if n, err := done.Read(half); n != 0 || err != io.EOF {
		t.Errorf("a pass read to its end, after Release: %d, %v; want 0, io.EOF", n, err)
	}
	if _, err := b.reopen(); !errors.Is(err, ErrBodyReleased) {
		t.Errorf("reopened after Release: %v; want ErrBodyReleased", err)
	}
	if b.Len() != int64(len(data)) {
		t.Errorf("Len %d after Release; want %d", b.Len(), len(data))
	}
}

// A Backend's translation of a Body is released with it, made before
// the release or after.
func TestBodyFromIsReleasedWithItsSource(t *testing.T) {
	src := NewBody([]byte("{}"))
	io.ReadAll(src)
	before := BodyFrom(src, []byte(`{"translated":1}`))
	src.Release()
	after := BodyFrom(src, []byte(`{"translated":2}`))
	for name, b := range map[string]*Body{"before": before, "after": after} {
		if _, err := b.reopen(); !errors.Is(err, ErrBodyReleased) {
			t.Errorf("a translation made %s the release is not released: %v", name, err)
		}
	}
	other := BodyFrom(strings.NewReader("{}"), []byte("{}"))
	if _, err := other.reopen(); err != nil {
		t.Errorf("a translation of a plain reader: %v", err)
	}
}

// Sent through Do, a Body is what the transport would resend (GetBody),
// and once released the transport holds none of its bytes though the
// answer is still open: they are collected.
func TestDoHoldsNoBytesOfAReleasedBody(t *testing.T) {
	quiet := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: ping\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-quiet:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(quiet)
	base, _ := url.Parse(srv.URL)
	c := New(base, Options{})
	defer c.CloseIdleConnections()

	data := bytes.Repeat([]byte("x"), 512<<10)
	held := weak.Make(&data[0])
	b := NewBody(data)
	data = nil
	in, _ := http.NewRequest(http.MethodPost, "http://sluice/v1/messages", nil)
	resp, err := c.Do(context.Background(), in, b, b.Len())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if resp.Request.GetBody == nil {
		t.Fatal("the request sent has no GetBody: the transport could not resend it")
	}
	again, err := resp.Request.GetBody()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := io.Copy(io.Discard, again); n != b.Len() {
		t.Errorf("GetBody's pass has %d bytes; want %d", n, b.Len())
	}
	b.Release()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		runtime.GC()
		if held.Value() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the released body's bytes are still reachable while its answer is open")
		}
	}
	runtime.KeepAlive(b)
}

// A server that answers before it has read the request leaves the
// transport still sending the body when the answer comes; released then,
// the rest of it is never sent, and the transport's late reads get a
// clean error (the connection is closed, the answer ends with an error),
// not a panic nor a race.
func TestReleasedBodyLateReader(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	readBody := make(chan struct{})
	got := make(chan int64, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		req, err := http.ReadRequest(br)
		if err != nil {
			got <- -1
			return
		}
		// Answered at once, the body unread: the client's writer blocks
		// once the socket's buffers are full.
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"16\r\nevent: ping\ndata: {}\n\n\r\n")
		<-readBody
		n, _ := io.Copy(io.Discard, req.Body)
		got <- n
	}()
	base, _ := url.Parse("http://" + ln.Addr().String())
	c := New(base, Options{})
	defer c.CloseIdleConnections()
	b := NewBody(bytes.Repeat([]byte("x"), 32<<20))
	in, _ := http.NewRequest(http.MethodPost, "http://sluice/v1/messages", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Do(ctx, in, b, b.Len())
	if err != nil {
		close(readBody)
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "event: ping\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	b.Release() // as the writer goroutine is still sending it
	close(readBody)
	if n := <-got; n < 0 || n >= b.Len() {
		t.Errorf("the server read %d bytes of the body; want fewer than its %d, the rest released", n, b.Len())
	}
	if _, err := io.Copy(io.Discard, br); err == nil {
		t.Error("the answer ended cleanly though its request was cut short")
	}
}
