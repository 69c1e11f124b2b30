package proxy

// Request paths sluice refuses before relaying: dot segments, empty
// segments and semicolons.

import (
	"bufio"
	"net/http"
	"testing"
)

// "..;" is no dot segment to path.Clean, but Tomcat and the gateways
// built on it drop a segment's ";parameters" and then read ".." there:
// relayed, /v1/..;/..;/admin would leave UPSTREAM_URL's path prefix on
// such an upstream. A semicolon in the path is refused.
func TestSemicolonDotSegmentsAreRefused(t *testing.T) {
	seen := &upstreamSeen{}
	up := startUpstream(t, seen.handler)
	_, px := startProxy(t, testConfig(t, up.URL+"/anthropic", true))
	addr := px.Listener.Addr().String()
	for _, line := range []string{"GET /v1/..;/..;/admin HTTP/1.1", "GET /v1/%2e%2e;/%2e%2e;/admin HTTP/1.1", "GET /v1/models/..;x=1/..;/..;/admin HTTP/1.1"} {
		conn := rawRequest(t, addr, line+"\r\nHost: "+addr+"\r\nX-Api-Key: sk-test", "")
		resp, _ := readAnswer(t, conn, bufio.NewReader(conn))
		if resp.StatusCode < 400 {
			t.Errorf("%s: %d; want it refused like a dot segment", line, resp.StatusCode)
		}
	}
	if n := seen.count(); n != 0 {
		t.Errorf("the upstream saw %v", seen.paths)
	}
}

// A path with empty or dot segments gets an Anthropic-shaped 404, not Go's
// plain-text redirect.
func TestUncleanPathIsAnAnthropicShaped404(t *testing.T) {
	up := startUpstream(t, apiHandler)
	_, px := startProxy(t, testConfig(t, up.URL, false))
	for _, path := range []string{"//v1/models", "/v1/../v1/models", "/v1/%2e%2e/models"} {
		conn := rawRequest(t, px.Listener.Addr().String(), "GET "+path+" HTTP/1.1\r\nHost: sluice", "")
		resp, body := readAnswer(t, conn, bufio.NewReader(conn))
		wantErrorAnswer(t, resp, body, http.StatusNotFound, "not_found_error", "dot segments")
	}
}
