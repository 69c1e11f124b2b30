package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/record"
	"github.com/sluicehq/sluice/request"
)

// recordBodies records bodies as a recording sluice would, and reads the
// recording back.
func recordBodies(t *testing.T, bodies ...[]byte) *record.Recording {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	rc, err := record.Open(record.Config{Path: path, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for i, b := range bodies {
		d, _ := request.Parse(b, nil)
		rc.Add(&record.Exchange{Arrival: at.Add(time.Duration(i) * time.Second), Body: b, Model: d.Model, Stream: d.Stream, MaxTokens: d.Cost.MaxTokens, Status: 200})
	}
	rc.Close()
	rec, err := record.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// claudeCodeLike are two turns of an agent shaped like Claude Code's
// requests: tools, an attribution line, two cached system blocks, turns
// with a tool call and its result, the last block cached.
func claudeCodeLike() [][]byte {
	tools := `"tools":[{"name":"Read","description":"` + strings.Repeat("Reads a file. ", 120) + `","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}},` +
		`{"name":"Edit","description":"` + strings.Repeat("Edits a file. ", 90) + `","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}]`
	system := func(v string) string {
		return `"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.` + v + `; cc_entrypoint=sdk-cli;"},` +
			`{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}},` +
			`{"type":"text","text":"` + strings.Repeat("Work carefully. ", 400) + `","cache_control":{"type":"ephemeral","ttl":"1h"}}]`
	}
	first := `{"role":"user","content":[{"type":"text","text":"fix the bug"}]}`
	return [][]byte{
		[]byte(`{"model":"claude-sonnet-4-5","max_tokens":128000,"stream":true,` + tools + `,` + system("a1b") + `,"messages":[` + first + `]}`),
		[]byte(`{"model":"claude-sonnet-4-5","max_tokens":128000,"stream":true,` + tools + `,` + system("c2d") + `,"messages":[` + first + `,` +
			`{"role":"assistant","content":[{"type":"text","text":"Reading."},{"type":"tool_use","id":"t1","name":"Read","input":{"path":"main.go"}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"package main"},{"type":"text","text":"go on","cache_control":{"type":"ephemeral"}}]}]}`),
	}
}

// A replayed body has the recorded structure: the tokens of each block and
// of the whole prompt, the breakpoints where they were, and blocks equal
// exactly where the recorded ones hashed equal. Recorded again, it gives
// the same shape.
func TestReplayBodyKeepsTheStructure(t *testing.T) {
	rec := recordBodies(t, claudeCodeLike()...)
	var replayed [][]byte
	for _, r := range rec.Requests {
		body := replayBody(&r)
		d, err := request.Parse(body, nil)
		if err != nil {
			t.Fatalf("replayed body does not parse: %v\n%s", err, body)
		}
		if d.Cost.InputTokens != promptTokens(&r) {
			t.Errorf("replayed prompt is %d tokens; recorded %d", d.Cost.InputTokens, promptTokens(&r))
		}
		var breaks []int
		total := 0
		for _, b := range r.Blocks {
			if b.Type != "attribution" { // in no prefix (docs/sim.md, "The attribution line")
				total += b.Tokens
			}
			if b.Cache != nil {
				breaks = append(breaks, total)
			}
		}
		if len(d.Prefixes) != len(breaks) {
			t.Fatalf("%d breakpoints replayed; %d recorded", len(d.Prefixes), len(breaks))
		}
		for i, p := range d.Prefixes {
			if p.Tokens != breaks[i] {
				t.Errorf("breakpoint %d at %d tokens; recorded %d", i, p.Tokens, breaks[i])
			}
		}
		if d.Model != r.Model || !d.Stream || d.Cost.MaxTokens != 128000 {
			t.Errorf("replayed model %q, stream %v, max_tokens %d", d.Model, d.Stream, d.Cost.MaxTokens)
		}
		replayed = append(replayed, body)
	}
	again := recordBodies(t, replayed...)
	for i, r := range rec.Requests {
		a := again.Requests[i]
		if len(a.Blocks) != len(r.Blocks) {
			t.Fatalf("request %d: %d blocks recorded again; %d first", i, len(a.Blocks), len(r.Blocks))
		}
		for j, b := range r.Blocks {
			g := a.Blocks[j]
			if g.In != b.In || g.Tokens != b.Tokens || (g.Cache == nil) != (b.Cache == nil) || b.In == "messages" && g.Role != b.Role {
				t.Errorf("request %d block %d: %+v recorded again; %+v first", i, j, g, b)
			}
			if b.Type == "attribution" && g.Type != "attribution" {
				t.Errorf("request %d block %d: the attribution line is replayed as %q", i, j, g.Type)
			}
			// Equal where they were equal across the two requests.
			if i == 1 && j < len(rec.Requests[0].Blocks) {
				was := b.Hash == rec.Requests[0].Blocks[j].Hash
				is := g.Hash == again.Requests[0].Blocks[j].Hash
				if was != is {
					t.Errorf("block %d: equal to the first request's %v recorded, %v replayed", j, was, is)
				}
			}
		}
	}
}

// Replaying a recording of a bench scenario's plain traffic reproduces
// the scenario's verdict: shared-prefix's, recorded through a plain
// sluice, replayed through plain and windowed, is won on input cost as
// the scenario is, with the plain path's prompt tokens exactly those of
// the scenario's.
func TestReplayReproducesTheVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scenario and its replay")
	}
	sc, err := LoadScenario("shared-prefix")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	rc, err := record.Open(record.Config{Path: path, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	orig, err := Run(ctx, Options{Scenario: sc, Recorder: func(mode string) *record.Recorder {
		if mode == ModePlain {
			return rc
		}
		return nil
	}})
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := record.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Requests) != 16 {
		t.Fatalf("%d requests recorded; want shared-prefix's 16", len(rec.Requests))
	}
	rsc, err := ReplayScenario(rec, ReplayOptions{Sim: sc.Sim})
	if err != nil {
		t.Fatal(err)
	}
	replay, err := Run(ctx, Options{Scenario: rsc})
	if err != nil {
		t.Fatal(err)
	}
	want, got := VerdictOf(sc.Verdict, orig, nil, ""), VerdictOf("replay", replay, nil, "")
	t.Logf("scenario: %s\nreplay:   %s", want.Line, got.Line)
	favours := func(v ScenarioVerdict, name string) string {
		for _, f := range v.Figures {
			if f.Name == name {
				return f.Favours
			}
		}
		return ""
	}
	if w, g := favours(want, "input_cost"), favours(got, "input_cost"); w != "wins" || g != w {
		t.Errorf("input cost favours windowed: %q in the scenario, %q replayed", w, g)
	}
	if !strings.HasPrefix(got.Line, "windowed ") || !strings.Contains(got.Line, "upstream 429s") || !strings.Contains(got.Line, "p50") {
		t.Errorf("replay verdict line: %s", got.Line)
	}
	prompt := func(r *Report, mode string) int64 {
		m := r.Mode(mode)
		return m.Tokens.Input + m.Tokens.CacheCreation + m.Tokens.CacheRead
	}
	if a, b := prompt(orig, ModePlain), prompt(replay, ModePlain); a != b {
		t.Errorf("plain's prompt tokens: %d in the scenario, %d replayed", a, b)
	}
	writes := func(r *Report, mode string) int64 { return r.Mode(mode).Tokens.CacheCreation }
	if writes(replay, ModeWindowed)*2 > writes(replay, ModePlain) {
		t.Errorf("replayed cache writes: windowed %d, plain %d; want windowed's well below", writes(replay, ModeWindowed), writes(replay, ModePlain))
	}
}
