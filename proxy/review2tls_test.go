package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// A stream over TLS (taken over, but no socket to write to directly: the
// writer's path) reaches the client whole, and the connection serves the
// next request: nothing bypassed the encryption.
func TestStreamOverTLSIsWholeAndTheConnectionServesOn(t *testing.T) {
	want := manyDeltas(30)
	up := startUpstream(t, streamOrMessage(func(w http.ResponseWriter) { sendFlushed(w, want, 1, 700, 9000) }))
	certPEM, keyPEM, pool := testCert(t, 1)
	f := startTLSProxy(t, up.URL, certPEM, keyPEM)
	c := tlsClient(pool)
	t.Cleanup(c.CloseIdleConnections)
	for i, body := range []string{streamRequestJSON, requestJSON, streamRequestJSON} {
		req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", "sk-test")
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || (i != 1 && string(got) != want) || (i == 1 && string(got) != messageJSON) {
			t.Fatalf("request %d: status %d, %d bytes, %v", i, resp.StatusCode, len(got), err)
		}
	}
}
