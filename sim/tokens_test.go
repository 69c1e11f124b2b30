package sim

import (
	"encoding/json"
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
	}
}
