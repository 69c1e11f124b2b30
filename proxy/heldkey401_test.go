package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
)

// A 401 from the upstream to the key sluice holds (inbound keys: clients
// present sluice keys) is not the client's key being wrong: the client is
// answered 502 api_error saying sluice's upstream key was refused, and the
// operator gets an error line and sluice_upstream_key_refused_total.
func TestHeldKeyRefusedIsSluicesProblem(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
		}))
		t.Cleanup(up.Close)
		keys := filepath.Join(t.TempDir(), "keys.json")
		writeKeys(t, keys, keyEntry("alice", ""))
		in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		_, srv := startProxyWith(t, testConfig(t, up.URL, windowed), Options{Inbound: in,
			Logger: slog.New(slog.NewTextHandler(lockedWriter{w: &logs}, nil))})
		status, body := send(t, "POST", srv.URL+"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, "x-api-key", sluiceKey("alice"))
		if status != 502 || errorType(t, body) != "api_error" || !strings.Contains(body, "not your") {
			t.Errorf("upstream 401 to the held key: %d %s; want 502 api_error saying the key sluice holds was refused, not the client's", status, body)
		}
		_, metrics := send(t, "GET", srv.URL+"/metrics", "", "", "")
		if !strings.Contains(metrics, "sluice_upstream_key_refused_total 1") {
			t.Errorf("/metrics lacks sluice_upstream_key_refused_total 1")
		}
		logMu.Lock()
		defer logMu.Unlock()
		if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "refused the API key sluice holds") {
			t.Errorf("no error line for the operator: %s", logs.String())
		}
	})
}
