package proxy

// An inbound key's model list against bodies that spell a member two ways.

import (
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// A key limited to some models: count_tokens and batch bodies were checked
// with encoding/json, which matches member names case-insensitively and
// lets the last of two matching names win, while the API matches names
// exactly, so a body the check read as an allowed model could carry
// another under the exact name the upstream reads. Names are now matched
// exactly, and a case variant of a checked name is refused.
func TestModelListHoldsAgainstCaseVariantNames(t *testing.T) {
	var seen atomic.Value
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b := readAll(t, r.Body)
		seen.Store(b)
		writeMessage(w)
	})
	keys := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, keys, keyEntry("haiku-only", `"models":["claude-haiku-4-5"]`))
	in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
	if err != nil {
		t.Fatal(err)
	}
	_, srv := startProxyWith(t, testConfig(t, up.URL, true), Options{Inbound: in})
	opus := `{"model":"claude-opus-4-5","Model":"claude-haiku-4-5","messages":[{"role":"user","content":"hi"}]}`
	batch := `{"requests":[{"custom_id":"a","params":{"model":"claude-opus-4-5","max_tokens":8,"messages":[]}}],"Requests":[]}`
	for _, tc := range []struct{ path, body string }{
		{"/v1/messages/count_tokens", opus},
		{"/v1/messages/batches", batch},
	} {
		// Refused either way: 403 for the model, or 400 for a body whose
		// member names differ from the checked ones only in case.
		status, body := send(t, "POST", srv.URL+tc.path, tc.body, "x-api-key", sluiceKey("haiku-only"))
		got, _ := seen.Load().(string)
		if (status != http.StatusForbidden && status != http.StatusBadRequest) || got != "" {
			t.Errorf("POST %s naming claude-opus-4-5 under \"model\" with a haiku-only key: %d %.60s; want 403 or 400, and nothing upstream (the upstream got %s)", tc.path, status, body, got)
		}
	}
	// The same trick on /v1/messages is refused before the check: a
	// decoder that ignores case would read the other model (issue 23).
	msg := `{"model":"claude-opus-4-5","Model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	status, body := send(t, "POST", srv.URL+"/v1/messages", msg, "x-api-key", sluiceKey("haiku-only"))
	if got, _ := seen.Load().(string); status != http.StatusBadRequest || got != "" {
		t.Errorf("POST /v1/messages with a case variant: %d %s; want 400, and nothing upstream (the upstream got %s)", status, body, got)
	}
}
