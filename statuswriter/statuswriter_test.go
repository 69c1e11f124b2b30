package statuswriter

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestStatusIsTheFirstSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(w *Writer)
		want int
	}{
		{"nothing", func(*Writer) {}, 0},
		{"explicit", func(w *Writer) { w.WriteHeader(529); w.WriteHeader(200) }, 529},
		{"write implies 200", func(w *Writer) { w.Write([]byte("x")) }, 200},
		{"flush implies 200", func(w *Writer) { w.Flush() }, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			w := Wrap(rec)
			tc.do(w)
			if w.Status() != tc.want {
				t.Fatalf("Status() = %d; want %d", w.Status(), tc.want)
			}
		})
	}
}

func TestWrittenCountsBodyBytes(t *testing.T) {
	w := Wrap(httptest.NewRecorder())
	w.WriteHeader(201)
	w.Write([]byte("hello, "))
	w.Write([]byte("world"))
	if w.Written() != 12 {
		t.Fatalf("Written() = %d; want 12", w.Written())
	}
}

func TestHijackWorksThroughTheWrapper(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(Wrap(w)).Hijack()
		if err != nil {
			t.Errorf("hijack through the wrapper: %v", err)
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 204 No Content\r\n\r\n")
		buf.Flush()
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || line != "HTTP/1.1 204 No Content\r\n" {
		t.Fatalf("got %q, %v", line, err)
	}
}
