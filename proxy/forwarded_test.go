package proxy

// Forwarding headers a client must not pass to the upstream.

import (
	"bufio"
	"strings"
	"testing"
)

// Headers that CGI-style gateways (and nginx with underscores_in_headers)
// read as X-Forwarded-For or X-Real-IP: a spelling with underscores
// canonicalises to another name in Go, and reached the upstream; they are
// dropped like the others now.
func TestUnderscoreForwardedHeadersAreDropped(t *testing.T) {
	seen := &upstreamSeen{}
	up := startUpstream(t, seen.handler)
	_, px := startProxy(t, testConfig(t, up.URL, false))
	addr := px.Listener.Addr().String()
	conn := rawRequest(t, addr, "GET /v1/models HTTP/1.1\r\nHost: "+addr+"\r\nX-Api-Key: sk-test\r\nX_Forwarded_For: 203.0.113.9\r\nX_Real_IP: 203.0.113.9", "")
	readAnswer(t, conn, bufio.NewReader(conn))
	if seen.count() != 1 {
		t.Fatalf("the upstream saw %d requests", seen.count())
	}
	for k := range seen.heads[0] {
		if strings.Contains(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "forwarded") || strings.Contains(strings.ToLower(k), "real") {
			t.Errorf("the upstream got %s: %q", k, seen.heads[0].Get(k))
		}
	}
}
