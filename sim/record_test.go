package sim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// RecordDir keeps each API request's head and exact body, and never a
// credential header.
func TestRecordDropsCredentials(t *testing.T) {
	dir := t.TempDir()
	s := New(Config{RecordDir: dir})
	defer s.Close()
	body := `{"model":"m","max_tokens":5,  "messages":[{"role":"user","content":"hi"}]}`
	call(s, "POST", "/v1/messages?beta=true", body, "x-api-key", "sk-secret-1", "Authorization", "Bearer sk-secret-2",
		"X-Goog-Api-Key", "sk-secret-3", "X-Claude-Code-Session-Id", "s1")
	head, err := os.ReadFile(filepath.Join(dir, "0001.request.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(head), "sk-secret") {
		t.Errorf("a credential was recorded:\n%s", head)
	}
	var r RecordedRequest
	if err := json.Unmarshal(head, &r); err != nil {
		t.Fatal(err)
	}
	if r.Path != "/v1/messages" || r.Query != "beta=true" || r.Header["x-claude-code-session-id"][0] != "s1" {
		t.Errorf("recorded %+v", r)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "0001.body")); string(got) != body {
		t.Errorf("body %q; want the exact bytes %q", got, body)
	}
}
