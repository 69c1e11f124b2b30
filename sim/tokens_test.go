package sim

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/request"
)

// sluice's request descriptor and the simulator estimate a prompt alike:
// the same input tokens, and the same tokens in each cached prefix.
func TestEstimateAsRequestDescriptor(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"Hello there, how are you?"}]}`,
		`{"model":"m","max_tokens":10,"system":"Be terse.\nVery terse.","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00"}]}`,
		`{"model":"m","max_tokens":10,"cache_control":{"type":"ephemeral","ttl":"1h"},
		  "tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}},"cache_control":{"type":"ephemeral"}}],
		  "system":[{"type":"text","text":"You are a weather bot."},{"type":"text","text":"Answer briefly.","cache_control":{"type":"ephemeral"}}],
		  "messages":[{"role":"user","content":[{"type":"text","text":"Paris?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},
		              {"role":"assistant","content":"Sunny."},{"role":"user","content":[{"type":"text","text":""}]}]}`,
		// Runs of tool_use and tool_result blocks, and a window that
		// reaches back past the first breakpoint's.
		`{"model":"m","max_tokens":10,"cache_control":{"type":"ephemeral"},
		  "system":[{"type":"text","text":"Rules.","cache_control":{"type":"ephemeral"}}],
		  "messages":[{"role":"user","content":"Read three files."},
		    {"role":"assistant","content":[{"type":"text","text":"Reading."},{"type":"tool_use","id":"a","name":"Read","input":{"p":1}},{"type":"tool_use","id":"b","name":"Read","input":{"p":2}},{"type":"tool_use","id":"c","name":"Read","input":{"p":3}}]},
		    {"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"one"},{"type":"tool_result","tool_use_id":"b","content":"two","cache_control":{"type":"ephemeral"}},{"type":"tool_result","tool_use_id":"c","content":"three"}]},
		    {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"Done."}]},
		    {"role":"user","content":[{"type":"text","text":"1"},{"type":"text","text":"2"},{"type":"text","text":"3"},{"type":"text","text":"4"},{"type":"text","text":"5"},{"type":"text","text":"6"},{"type":"text","text":"7"},{"type":"text","text":"8"},{"type":"text","text":"9"},{"type":"text","text":"10"},{"type":"text","text":"11"},{"type":"text","text":"12"},{"type":"text","text":"13"},{"type":"text","text":"14"},{"type":"text","text":"15"},{"type":"text","text":"16"},{"type":"text","text":"17"},{"type":"text","text":"18"},{"type":"text","text":"19"},{"type":"text","text":"20"},{"type":"text","text":"21"},{"type":"text","text":"22"}]}]}`,
	} {
		var req messagesRequest
		if err := json.Unmarshal([]byte(body), &req); err != nil {
			t.Fatal(err)
		}
		p, aerr := parsePrompt(&req)
		if aerr != nil {
			t.Fatal(aerr)
		}
		d, err := request.Parse([]byte(body), nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.Cost.InputTokens != p.total {
			t.Errorf("%s: descriptor estimates %d input tokens; the simulator %d", body, d.Cost.InputTokens, p.total)
		}
		if len(d.Prefixes) != len(p.breakpoints) {
			t.Fatalf("%s: %d prefixes; the simulator has %d breakpoints", body, len(d.Prefixes), len(p.breakpoints))
		}
		for i, bp := range p.breakpoints {
			if got := d.Prefixes[i]; got.Tokens != bp.tokens || got.TTL.String() != map[string]string{"5m": "5m0s", "1h": "1h0m0s"}[bp.ttl] {
				t.Errorf("%s: prefix %d = %+v; the simulator's breakpoint has %d tokens, ttl %s", body, i, got, bp.tokens, bp.ttl)
			}
		}
		// The positions a read may end at: each breakpoint's lookback
		// window, as the simulator searches them.
		var want []int
		next := 0
		for _, bp := range p.breakpoints {
			for j := max(next, bp.pos-lookbackPositions+1); j <= bp.pos; j++ {
				want = append(want, p.positions[j].tokens)
			}
			next = max(next, bp.pos+1)
		}
		var got []int
		for _, r := range d.Reads {
			got = append(got, r.Tokens)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: the descriptor's reads end at %v tokens; the simulator's lookback windows at %v", body, got, want)
		}
	}
}
