package request

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixture reads a captured request of a real client from testdata/clients
// (re-captured by `SLUICE_RECAPTURE=1 go test ./clients -run Capture`).
func fixture(t *testing.T, name string) ([]byte, http.Header) {
	t.Helper()
	base := filepath.Join("..", "testdata", "clients", name)
	body, err := os.ReadFile(base + ".body")
	if err != nil {
		t.Fatal(err)
	}
	var head struct {
		Header http.Header `json:"header"`
	}
	b, err := os.ReadFile(base + ".request.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &head); err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	for k, v := range head.Header {
		h[http.CanonicalHeaderKey(k)] = v
	}
	return body, h
}

const attribution = `{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.407; cc_entrypoint=sdk-cli;"}`

// A leading attribution line is in no prefix key: two bodies that differ
// only in it share every key, and equal the body without it; its tokens
// are input but in no prefix.
func TestAttributionLineOutOfKeys(t *testing.T) {
	rest := `{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}`
	other := strings.Replace(attribution, "407", "0ce; cch=1a2b3", 1)
	msgs := `[` + question + `]`
	a := parse(t, body(model, tools, `[`+attribution+`,`+rest+`]`, msgs, ""))
	b := parse(t, body(model, tools, `[`+other+`,`+rest+`]`, msgs, ""))
	none := parse(t, body(model, tools, `[`+rest+`]`, msgs, ""))
	if len(a.Prefixes) != 3 || len(b.Prefixes) != 3 || len(none.Prefixes) != 3 {
		t.Fatalf("prefixes: %d, %d, %d; want 3 each", len(a.Prefixes), len(b.Prefixes), len(none.Prefixes))
	}
	for i := range a.Prefixes {
		if a.Prefixes[i] != b.Prefixes[i] || a.Prefixes[i] != none.Prefixes[i] {
			t.Errorf("prefix %d: %+v, %+v, without the line %+v; want all equal", i, a.Prefixes[i], b.Prefixes[i], none.Prefixes[i])
		}
	}
	if a.Cost.InputTokens <= none.Cost.InputTokens {
		t.Errorf("input tokens %d with the line, %d without; the line's tokens are input", a.Cost.InputTokens, none.Cost.InputTokens)
	}
}

// Only a leading block of exactly type and text, spelled as the API's
// attribution line, is left out; anything else stays in the key.
func TestAttributionLineNothingElse(t *testing.T) {
	rest := `{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}`
	msgs := `[` + question + `]`
	base := parse(t, body(model, tools, `[`+rest+`]`, msgs, ""))
	for name, sys := range map[string]string{
		"with cache_control": `[{"type":"text","text":"x-anthropic-billing-header: cc_version=1;","cache_control":{"type":"ephemeral"}},` + rest + `]`,
		"second block":       `[{"type":"text","text":"Hi."},{"type":"text","text":"x-anthropic-billing-header: cc_version=1;"},` + rest + `]`,
		"other member":       `[{"type":"text","text":"x-anthropic-billing-header: cc_version=1;","citations":[]},` + rest + `]`,
		"not at the start":   `[{"type":"text","text":" x-anthropic-billing-header: cc_version=1;"},` + rest + `]`,
		"escaped spelling":   `[{"type":"text","text":"\u0078-anthropic-billing-header: cc_version=1;"},` + rest + `]`,
		"other case":         `[{"type":"text","text":"X-Anthropic-Billing-Header: cc_version=1;"},` + rest + `]`,
	} {
		d := parse(t, body(model, tools, sys, msgs, ""))
		if len(d.Prefixes) == 0 || d.Prefixes[len(d.Prefixes)-1].Key == base.Prefixes[len(base.Prefixes)-1].Key {
			t.Errorf("%s: the block was left out of the key; want it kept", name)
		}
	}
	// A string system prompt is never an attribution block.
	s1 := parse(t, body(model, "", `"x-anthropic-billing-header: a;"`, msgs, ""))
	s2 := parse(t, body(model, "", `"x-anthropic-billing-header: b;"`, msgs, ""))
	if s1.Prefixes[0].Key == s2.Prefixes[0].Key {
		t.Error("a string system prompt was normalised")
	}
}

// Claude Code's captured first requests of two different tasks: the
// attribution lines differ, and still the first prefix keys (tools and
// the identity line) are equal; the session's tool result turn keeps its
// first two. Without the exclusion they would differ.
func TestClaudeCodeFixturesShareFirstPrefixes(t *testing.T) {
	a, ha := fixture(t, "claude-code-first")
	b, _ := fixture(t, "claude-code-first-other-task")
	turn, _ := fixture(t, "claude-code-tool-result")
	la, lb := firstSystemText(t, a), firstSystemText(t, b)
	if !strings.HasPrefix(la, AttributionPrefix) || !strings.HasPrefix(lb, AttributionPrefix) || la == lb {
		t.Fatalf("fixtures' first system blocks %q and %q; want two different attribution lines", la, lb)
	}
	da, err := Parse(a, ha)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := Parse(b, nil)
	dt, _ := Parse(turn, nil)
	if len(da.Prefixes) < 2 || len(db.Prefixes) < 2 || len(dt.Prefixes) < 2 {
		t.Fatalf("prefixes %d, %d, %d; want at least 2 (identity line, main prompt)", len(da.Prefixes), len(db.Prefixes), len(dt.Prefixes))
	}
	// The tools and identity line are the same for every agent; the main
	// prompt names the agent's HOME (its memory folder), so it is shared
	// by the turns of one session, and by agents only with one HOME.
	if da.Prefixes[0] != db.Prefixes[0] || da.Prefixes[0] != dt.Prefixes[0] {
		t.Errorf("first prefix: %+v, other task %+v, tool result turn %+v; want equal", da.Prefixes[0], db.Prefixes[0], dt.Prefixes[0])
	}
	if da.Prefixes[1] != dt.Prefixes[1] {
		t.Errorf("second prefix: %+v, tool result turn %+v; want equal", da.Prefixes[1], dt.Prefixes[1])
	}
	t.Logf("Claude Code prefixes (tokens): %d, %d, %d of %d input", da.Prefixes[0].Tokens, da.Prefixes[1].Tokens, da.Prefixes[len(da.Prefixes)-1].Tokens, da.Cost.InputTokens)
	if da.Prefixes[0].Tokens < 5000 {
		t.Errorf("tools and identity prefix = %d tokens; want the ~7,800 of a Claude Code prompt", da.Prefixes[0].Tokens)
	}
	// With the line kept in, the keys differ: the exclusion is what joins them.
	ka := Descriptor{}
	if x, _ := Parse(bytes.Replace(a, []byte(AttributionPrefix), []byte("x-anthropic-billing-headex:"), 1), nil); len(x.Prefixes) > 0 {
		ka = x
	}
	kb, _ := Parse(bytes.Replace(b, []byte(AttributionPrefix), []byte("x-anthropic-billing-headex:"), 1), nil)
	if len(ka.Prefixes) == 0 || ka.Prefixes[0].Key == kb.Prefixes[0].Key {
		t.Error("with the attribution line not recognised the first keys are equal; the fixtures do not test the exclusion")
	}
	if !da.Stream || da.Cost.MaxTokens != 128000 || da.Model == "" {
		t.Errorf("descriptor %+v; want a stream with max_tokens 128000", da)
	}
}

func firstSystemText(t *testing.T, body []byte) string {
	t.Helper()
	var b struct {
		System []struct {
			Text string `json:"text"`
		} `json:"system"`
	}
	if err := json.Unmarshal(body, &b); err != nil || len(b.System) == 0 {
		t.Fatalf("fixture: %v, %d system blocks", err, len(b.System))
	}
	return b.System[0].Text
}

// The official SDKs' captured requests with a cached system prompt: one
// breakpoint each, on the system prompt, and no attribution line.
func TestSDKFixtures(t *testing.T) {
	for _, name := range []string{"sdk-go-cached", "sdk-ts-cached"} {
		b, h := fixture(t, name)
		d, err := Parse(b, h)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(d.Prefixes) != 1 || d.Prefixes[0].Tokens < 1024 || bytes.Contains(b, []byte(AttributionPrefix)) {
			t.Errorf("%s: prefixes %+v; want one system prefix over 1024 tokens", name, d.Prefixes)
		}
	}
}

// A subagent's request (captured: Claude Code's Agent tool) carries an
// attribution line of its own, computed from its own content: it is in
// none of the subagent's keys either, so a fleet's subagents started on
// one prompt group as their parents do.
func TestClaudeCodeSubagentFixture(t *testing.T) {
	sub, h := fixture(t, "claude-code-subagent")
	parent, _ := fixture(t, "claude-code-first")
	if h.Get("X-Claude-Code-Agent-Id") == "" {
		t.Fatal("the subagent fixture has no x-claude-code-agent-id header: it is not a subagent's request")
	}
	ls, lp := firstSystemText(t, sub), firstSystemText(t, parent)
	if !strings.HasPrefix(ls, AttributionPrefix) || ls == lp {
		t.Fatalf("subagent's first system block %q, its parent's %q; want an attribution line of its own", ls, lp)
	}
	ds, err := Parse(sub, nil)
	if err != nil {
		t.Fatal(err)
	}
	swapped, err := Parse(bytes.Replace(sub, []byte(ls), []byte(lp), 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Prefixes) == 0 || len(ds.Prefixes) != len(swapped.Prefixes) {
		t.Fatalf("prefixes %d, with the parent's line %d; want the same, at least one", len(ds.Prefixes), len(swapped.Prefixes))
	}
	for i := range ds.Prefixes {
		if ds.Prefixes[i] != swapped.Prefixes[i] {
			t.Errorf("prefix %d: %+v; with the parent's attribution line %+v; want equal", i, ds.Prefixes[i], swapped.Prefixes[i])
		}
	}
}
