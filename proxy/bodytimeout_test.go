package proxy

// A request body that stops arriving.

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// A body that stops arriving is answered 408 on every path that reads a
// body, then the connection is closed; never left hanging, never an empty
// 200 (which a 1 MB declared body used to get).
func TestStalledBodyIsAnswered408AndTheConnectionClosed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		windowed bool
		path     string
		declared int
	}{
		{"messages plain", false, "/v1/messages", 100},
		{"messages windowed", true, "/v1/messages", 100},
		{"messages windowed, 1 MB declared", true, "/v1/messages", 1 << 20},
		{"count_tokens", true, "/v1/messages/count_tokens", 100},
		{"batches", true, "/v1/messages/batches", 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, apiHandler)
			_, px := startProxyWith(t, testConfig(t, up.URL, tc.windowed), Options{BodyReadTimeout: time.Second})
			head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nX-Api-Key: sk-test\r\nContent-Length: %d", tc.path, tc.declared)
			conn := rawRequest(t, px.Listener.Addr().String(), head, `{"model":"`)
			br := bufio.NewReader(conn)
			resp, body := readAnswer(t, conn, br)
			wantErrorAnswer(t, resp, body, http.StatusRequestTimeout, "invalid_request_error", "did not arrive")
			if _, err := br.ReadByte(); err != io.EOF {
				t.Errorf("after the 408 the connection is still open (read: %v)", err)
			}
		})
	}
}
