package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/request"
)

// ccBody is the part of a Claude Code request the shape test reads.
type ccBody struct {
	MaxTokens int  `json:"max_tokens"`
	Stream    bool `json:"stream"`
	Tools     []struct {
		Name string `json:"name"`
	} `json:"tools"`
	System []struct {
		Text         string          `json:"text"`
		CacheControl json.RawMessage `json:"cache_control"`
	} `json:"system"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

func parseCC(t *testing.T, b []byte) (ccBody, request.Descriptor) {
	t.Helper()
	var v ccBody
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	d, err := request.Parse(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v, d
}

// The claude-code-fleet scenario's requests have the captured shape: an
// attribution line first in system that differs per agent and carries no
// cache_control, 5 tools, max_tokens 128000, streamed; the tools and
// identity line are one prefix across agents (the line left out of its
// key), the main prompt one per agent; and each turn extends the one
// before with the tool call and its result, the breakpoint on the result.
// A short run through plain and windowed then writes the shared prefix
// once windowed instead of once per agent.
func TestClaudeCodeFleetShape(t *testing.T) {
	sc, err := LoadScenario("claude-code-fleet")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Workload.Shape != ShapeClaudeCode || sc.Verdict != "cache" {
		t.Fatalf("shape %q, verdict %q", sc.Workload.Shape, sc.Verdict)
	}
	shape := newClaudeCodeShape(sc.Seed, sc.Workload.PromptTokens)
	as, err := sc.Arrivals()
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	var shared, main []uint64
	turns := map[int][][]byte{} // agent 0's turns
	for i, a := range as {
		b := shape.body("claude-opus-5-5", i, a)
		if a.Session == 0 {
			turns[a.Turn] = append(turns[a.Turn], b)
		}
		if a.Turn != 0 {
			continue
		}
		v, d := parseCC(t, b)
		if v.MaxTokens != 128000 || !v.Stream || len(v.Tools) != len(claudeCodeTools) || len(v.System) != 3 {
			t.Fatalf("agent %d: max_tokens %d, stream %v, %d tools, %d system blocks; want 128000, true, %d, 3",
				a.Session, v.MaxTokens, v.Stream, len(v.Tools), len(v.System), len(claudeCodeTools))
		}
		first := v.System[0]
		if !strings.HasPrefix(first.Text, request.AttributionPrefix+" cc_version=2.1.332.") || first.CacheControl != nil {
			t.Fatalf("agent %d: system[0] %q (cache_control %s); want an attribution line without cache_control", a.Session, first.Text, first.CacheControl)
		}
		lines[first.Text] = true
		if v.System[1].CacheControl == nil || v.System[2].CacheControl == nil {
			t.Errorf("agent %d: the identity line and the main prompt want cache_control", a.Session)
		}
		if len(v.Messages) != 2 || v.Messages[0].Role != "user" || v.Messages[1].Role != "system" {
			t.Fatalf("agent %d: first turn's messages %+v; want a user turn and a system turn", a.Session, v.Messages)
		}
		if len(d.Prefixes) < 3 {
			t.Fatalf("agent %d: %d prefixes; want the identity line's, the main prompt's and the system turn's", a.Session, len(d.Prefixes))
		}
		shared, main = append(shared, d.Prefixes[0].Key), append(main, d.Prefixes[1].Key)
		if tok := d.Prefixes[0].Tokens; tok < 1700 || tok > 2100 {
			t.Errorf("agent %d: shared prefix of %d tokens; want about 1,900 (the captured tools and identity line)", a.Session, tok)
		}
	}
	n := sc.Workload.N
	if len(lines) != n || len(shared) != n {
		t.Fatalf("%d distinct attribution lines for %d agents; want one each", len(lines), len(shared))
	}
	for i := range shared {
		if shared[i] != shared[0] {
			t.Errorf("agent %d's tools-and-identity prefix has another key than agent 0's: the attribution line is in it", i)
		}
		if i > 0 && main[i] == main[0] {
			t.Errorf("agent %d's main prompt shares agent 0's key; want it per agent (its working directory)", i)
		}
	}

	// Turn k+1 is turn k with an assistant tool call and its result; only
	// the last block carries cache_control.
	for k := 1; k < sc.Workload.Turns; k++ {
		prev, _ := parseCC(t, turns[k-1][0])
		cur, d := parseCC(t, turns[k][0])
		if len(cur.Messages) != len(prev.Messages)+2 {
			t.Fatalf("turn %d: %d messages after %d", k, len(cur.Messages), len(prev.Messages))
		}
		for j := 2; j < len(prev.Messages); j++ {
			if want := bytes.Replace(prev.Messages[j].Content, []byte(`"cache_control":{"type":"ephemeral"},`), nil, 1); !bytes.Equal(cur.Messages[j].Content, want) {
				t.Errorf("turn %d: message %d is not turn %d's, breakpoint aside", k, j, k-1)
			}
		}
		call, result := cur.Messages[len(cur.Messages)-2], cur.Messages[len(cur.Messages)-1]
		if call.Role != "assistant" || !bytes.Contains(call.Content, []byte(`"type":"tool_use"`)) ||
			result.Role != "user" || !bytes.Contains(result.Content, []byte(`"type":"tool_result"`)) {
			t.Errorf("turn %d ends with %s %s, %s %s; want a tool call and its result", k, call.Role, call.Content, result.Role, result.Content)
		}
		all, _ := json.Marshal(cur.Messages)
		if c := bytes.Count(all, []byte("cache_control")); c != 1 || !bytes.Contains(result.Content, []byte("cache_control")) {
			t.Errorf("turn %d: %d breakpoints in messages; want one, on the tool result", k, c)
		}
		if d.Prefixes[0].Key != shared[0] {
			t.Errorf("turn %d: the shared prefix changed within the session", k)
		}
	}

	if testing.Short() {
		t.Skip("the run takes seconds")
	}
	small := *sc
	small.Workload.N, small.Workload.Duration, small.Workload.Turns = 6, Duration(100e6), 2
	rep, err := Run(context.Background(), Options{Scenario: &small, Modes: []string{ModePlain, ModeWindowed}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rep.Modes {
		if m.Sent != 12 || m.Succeeded != 12 {
			t.Fatalf("%s: sent %d, succeeded %d (%v); want all 12", m.Mode, m.Sent, m.Succeeded, m.Errors)
		}
	}
	plain, windowed := rep.Mode(ModePlain).Tokens.CacheCreation, rep.Mode(ModeWindowed).Tokens.CacheCreation
	t.Logf("cache-write tokens: plain %d, windowed %d", plain, windowed)
	// Windowed, the ~1,900 shared tokens are written once, not six times.
	if windowed > plain-4*1800 {
		t.Errorf("cache writes: windowed %d, plain %d; want windowed's at least 4 shared prefixes fewer", windowed, plain)
	}
	if v := VerdictOf(sc.Verdict, rep, nil, ""); !strings.Contains(v.Line, "input cost") {
		t.Errorf("verdict line %q names no input cost", v.Line)
	}
}
