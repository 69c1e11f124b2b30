package request

import (
	"strings"
	"testing"
)

// blocksOf is ParseBlocks of body, failing the test on a refusal.
func blocksOf(t *testing.T, body string) (Descriptor, []Block) {
	t.Helper()
	d, bs, err := ParseBlocks([]byte(body), nil)
	if err != nil {
		t.Fatalf("ParseBlocks(%s): %v", body, err)
	}
	return d, bs
}

// Each block is named by where it sits, in prefix order; its hash chains
// every block before it, and cache_control does not change it.
func TestParseBlocks(t *testing.T) {
	tools := `[{"name":"a","description":"A"},{"name":"b","description":"B","cache_control":{"type":"ephemeral"}}]`
	system := `[{"type":"text","text":"line one"},{"type":"text","text":"line two","cache_control":{"type":"ephemeral"}}]`
	msgs := `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"yes"},{"type":"text","text":"and"}]},{"content":"later","role":"user"}]`
	d, bs := blocksOf(t, body(model, tools, system, msgs, ""))
	var got []string
	for _, b := range bs {
		got = append(got, b.Position())
	}
	want := "tools[0] tools[1] system[0] system[1] messages[0] messages[1] messages[1] messages[2]"
	if strings.Join(got, " ") != want {
		t.Fatalf("positions %v; want %s", got, want)
	}
	if !bs[1].Breakpoint || !bs[3].Breakpoint || bs[0].Breakpoint || bs[7].Breakpoint {
		t.Errorf("breakpoints %+v; want tools[1] and system[1] only", bs)
	}
	if bs[3].Tokens != d.Prefixes[1].Tokens || bs[7].Tokens != d.Cost.InputTokens {
		t.Errorf("cumulative tokens %d and %d; want the prefix's %d and the prompt's %d",
			bs[3].Tokens, bs[7].Tokens, d.Prefixes[1].Tokens, d.Cost.InputTokens)
	}
	// Parse gives the same descriptor, and no blocks are kept without
	// asking.
	if p := parse(t, body(model, tools, system, msgs, "")); p.Cost != d.Cost || len(p.Prefixes) != len(d.Prefixes) || p.Prefixes[1] != d.Prefixes[1] {
		t.Errorf("Parse %+v; ParseBlocks %+v", p, d)
	}

	// The same prompt without its markers: the same hashes. A changed
	// system[0]: the tools' hashes alike, every later one different.
	plain := strings.ReplaceAll(body(model, tools, system, msgs, ""), `,"cache_control":{"type":"ephemeral"}`, "")
	_, bs2 := blocksOf(t, plain)
	for i := range bs {
		if bs2[i].Hash != bs[i].Hash {
			t.Errorf("%s hashes differently without cache_control", bs[i].Position())
		}
	}
	_, bs3 := blocksOf(t, body(model, tools, strings.Replace(system, "line one", "line 1", 1), msgs, ""))
	for i := range bs {
		if same := bs3[i].Hash == bs[i].Hash; same != (i < 2) {
			t.Errorf("%s: same hash %v after system[0] changed", bs[i].Position(), same)
		}
	}
	// Another model: no block alike.
	_, bs4 := blocksOf(t, body(`"claude-opus-4-1"`, tools, system, msgs, ""))
	if bs4[0].Hash == bs[0].Hash {
		t.Error("tools[0] hashes alike under another model")
	}
}

// A string system prompt is system[0]; the top-level cache_control marks
// the last block; ParseBlocks keeps at most MaxBlocks.
func TestParseBlocksEdges(t *testing.T) {
	_, bs := blocksOf(t, body(model, "", `"be brief"`, `[{"role":"user","content":"hi"}]`, `"cache_control":{"type":"ephemeral"}`))
	if len(bs) != 2 || bs[0].Position() != "system[0]" || bs[0].Breakpoint || !bs[1].Breakpoint {
		t.Errorf("blocks %+v; want system[0], then messages[0] with the top-level breakpoint", bs)
	}
	var m strings.Builder
	m.WriteString(`[{"role":"user","content":[`)
	for i := range MaxBlocks + 10 {
		if i > 0 {
			m.WriteByte(',')
		}
		m.WriteString(`{"type":"text","text":"x"}`)
	}
	m.WriteString(`]}]`)
	d, bs := blocksOf(t, body(model, "", "", m.String(), ""))
	if len(bs) != MaxBlocks || d.Cost.InputTokens != MaxBlocks+10 {
		t.Errorf("%d blocks kept, %d tokens; want %d blocks and every block's token", len(bs), d.Cost.InputTokens, MaxBlocks)
	}
}
