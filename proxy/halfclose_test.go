package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// A client that half-closes its side (shutdown(SHUT_WR)) after a whole
// request cannot be told from one that hung up without writing to it, and
// sluice takes it as gone (docs/semantics.md, Departure). Whatever it does,
// it never answers a success that holds nothing: before (81f80b9) every path
// below answered "200 OK" with Content-Length: 0, and nothing had gone
// upstream (issue 37, item 5). Now the connection is closed without an
// answer.
func TestHalfClosedClientGetsNoEmptySuccess(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select { // slow enough for the client's FIN to be seen first
		case <-time.After(500 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		apiHandler(w, r)
	})
	for _, tc := range []struct {
		name     string
		windowed bool
		method   string
		path     string
		body     string
	}{
		{"plain", false, "POST", "/v1/messages", requestJSON},
		{"plain stream", false, "POST", "/v1/messages", streamRequestJSON},
		{"windowed", true, "POST", "/v1/messages", requestJSON},
		{"windowed stream", true, "POST", "/v1/messages", streamRequestJSON},
		{"relay", false, "POST", "/v1/messages/count_tokens", requestJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, px := startProxyWith(t, testConfig(t, up.URL, tc.windowed, func(c *config.Config) { c.MaxWait = 50 * time.Millisecond }), Options{})
			conn, err := net.Dial("tcp", px.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", tc.method, tc.path, len(tc.body), tc.body)
			conn.(*net.TCPConn).CloseWrite()
			conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(conn)
			if err != nil && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("read: %v (got %q)", err, got)
			}
			if len(got) == 0 {
				return // closed without an answer
			}
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(got))), nil)
			if err != nil {
				t.Fatalf("not an HTTP answer: %q", got)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode/100 == 2 && len(body) == 0 {
				t.Fatalf("a half-closed client got %s with an empty body: a success that holds nothing\n%q", resp.Status, got)
			}
		})
	}
}
