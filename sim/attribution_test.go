package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func fixtureBody(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "clients", name+".body"))
	if err != nil {
		t.Fatal(err)
	}
	// Answered as JSON rather than streamed: the usage is the same.
	return strings.Replace(string(b), `"stream":true`, `"stream":false`, 1)
}

// Claude Code's first requests of two different tasks (captured, with
// different attribution lines): the second reads the tools-and-identity
// prefix the first wrote, as the API caches them, and writes only the
// part that is its own. Without the exclusion it would write it all.
func TestClaudeCodeAttributionLineCached(t *testing.T) {
	s := New(Config{Seed: 1, ToolUseShare: -1})
	defer s.Close()
	a, b := fixtureBody(t, "claude-code-first"), fixtureBody(t, "claude-code-first-other-task")
	u1 := decode(t, call(s, "POST", "/v1/messages", a)).Usage
	u2 := decode(t, call(s, "POST", "/v1/messages", b)).Usage
	if u1.CacheRead != 0 || u1.CacheCreation == 0 {
		t.Fatalf("first request usage %+v; want a write and no read", u1)
	}
	if u2.CacheRead < 5000 || u2.CacheCreation >= u1.CacheCreation {
		t.Errorf("other task's usage %+v after %+v; want the ~7,800-token shared prefix read", u2, u1)
	}
	// The same bodies with the line not recognised: no read.
	s.Reset()
	x := strings.Replace(a, "x-anthropic-billing-header:", "x-anthropic-billing-headex:", 1)
	y := strings.Replace(b, "x-anthropic-billing-header:", "x-anthropic-billing-headex:", 1)
	decode(t, call(s, "POST", "/v1/messages", x))
	if u := decode(t, call(s, "POST", "/v1/messages", y)).Usage; u.CacheRead != 0 {
		t.Errorf("with the line as prompt text, usage %+v; want no read", u)
	}
}
