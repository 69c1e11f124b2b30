package sim

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// What current official clients send must be accepted, as the API accepts it.

func countTokens(t *testing.T, s *Server, body string) int {
	t.Helper()
	w := call(s, "POST", "/v1/messages/count_tokens", body)
	if w.Code != 200 {
		t.Fatalf("count_tokens status %d: %s", w.Code, w.Body)
	}
	var out struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
		t.Fatalf("count_tokens %s: %v", w.Body, err)
	}
	return out.InputTokens
}

func TestSystemTurns(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	turn := strings.Repeat("note ", 400) // 2000 characters, 500 tokens
	without := `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"go on"}]}`
	with := `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"hi"},{"role":"system","content":[{"type":"text","text":"` + turn + `"}]},{"role":"assistant","content":"hello"},{"role":"user","content":"go on"}]}`

	d := decode(t, call(s, "POST", "/v1/messages", with))
	if d.Type != "message" {
		t.Fatalf("a system turn in messages: %+v; want a message", d)
	}
	if got, base := countTokens(t, s, with), countTokens(t, s, without); got != base+500 {
		t.Errorf("count_tokens with a system turn = %d; want %d + 500", got, base)
	}
	// A string content is shorthand for one text block, as for the other roles.
	str := strings.Replace(with, `[{"type":"text","text":"`+turn+`"}]`, strconv.Quote(turn), 1)
	if got := countTokens(t, s, str); got != countTokens(t, s, with) {
		t.Errorf("string system turn counts %d; want %d", got, countTokens(t, s, with))
	}
	// A system turn takes text only.
	img := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"system","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`
	wantError(t, call(s, "POST", "/v1/messages", img), 400, "invalid_request_error", "messages.1.content.0.type")
	wantError(t, call(s, "POST", "/v1/messages", `{"model":"m","max_tokens":5,"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]}`),
		400, "invalid_request_error", "system.0.type")
}

// A system turn sits in the messages segment list: a breakpoint after it
// covers it, one before it does not, and it is not the same prefix as the
// same text in the top-level system prompt.
func TestSystemTurnCacheOrder(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	sys := strings.Repeat("rule ", 1000) // 1250 tokens
	body := func(turn string) string {
		return `{"model":"claude-sonnet-4-5","max_tokens":50,
		"system":[{"type":"text","text":"` + sys + `","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":"start"},
			{"role":"system","content":[{"type":"text","text":"` + turn + `"}]},
			{"role":"user","content":[{"type":"text","text":"next","cache_control":{"type":"ephemeral"}}]}]}`
	}
	first := decode(t, call(s, "POST", "/v1/messages", body("reminder one")))
	if first.Usage.CacheCreation == 0 || first.Usage.CacheRead != 0 {
		t.Fatalf("first request: %+v; want a cache write", first.Usage)
	}
	again := decode(t, call(s, "POST", "/v1/messages", body("reminder one")))
	if again.Usage.CacheRead != first.Usage.CacheCreation || again.Usage.CacheCreation != 0 {
		t.Errorf("same request again: %+v; want all %d read", again.Usage, first.Usage.CacheCreation)
	}
	// Another system turn: the system prompt's breakpoint still hits, the
	// one after the turn is written again.
	other := decode(t, call(s, "POST", "/v1/messages", body("reminder two")))
	if other.Usage.CacheRead != 1250 || other.Usage.CacheCreation == 0 {
		t.Errorf("changed system turn: %+v; want 1250 read and the rest written", other.Usage)
	}
	// The same text as a top-level system prompt is another prefix.
	moved := `{"model":"claude-sonnet-4-5","max_tokens":50,"cache_control":{"type":"ephemeral"},"messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"x"}]}`
	top := `{"model":"claude-sonnet-4-5","max_tokens":50,"cache_control":{"type":"ephemeral"},"system":"` + sys + `","messages":[{"role":"user","content":"x"}]}`
	decode(t, call(s, "POST", "/v1/messages", top))
	if d := decode(t, call(s, "POST", "/v1/messages", moved)); d.Usage.CacheRead != 0 {
		t.Errorf("system turn after a top-level system prompt of the same text: %+v; want no read", d.Usage)
	}
}

// Fields the simulator does not model are accepted, each on its own.
func TestUnmodelledFieldsAccepted(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	fields := map[string]string{
		"metadata":           `{"user_id":"user_0123456789abcdef"}`,
		"output_config":      `{"effort":"high"}`,
		"output_config json": `{"format":{"type":"json_schema","schema":{"type":"object"}}}`,
		"context_management": `{"edits":[{"type":"clear_tool_uses_20250919"}]}`,
		"service_tier":       `"auto"`,
		"temperature":        `0.7`,
		"top_k":              `40`,
		"top_p":              `0.9`,
		"inference_geo":      `"us"`,
		"speed":              `"fast"`,
		"container":          `"container_1"`,
		"diagnostics":        `{"previous_message_id":"msg_1"}`,
		"a_future_field":     `{"anything":[1,2,3]}`,
	}
	for name, value := range fields {
		t.Run(name, func(t *testing.T) {
			field, _, _ := strings.Cut(name, " ")
			body := `{"model":"claude-sonnet-4-5","max_tokens":50,` + strconv.Quote(field) + `:` + value + `,"messages":[{"role":"user","content":"hi"}]}`
			for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
				if w := call(s, "POST", path, body); w.Code != 200 {
					t.Errorf("%s with %s: status %d: %s", path, field, w.Code, w.Body)
				}
			}
			stream := strings.Replace(body, `"max_tokens":50,`, `"max_tokens":50,"stream":true,`, 1)
			if w := call(s, "POST", "/v1/messages", stream); w.Code != 200 || !strings.Contains(w.Body.String(), "event: message_stop") {
				t.Errorf("streamed with %s: status %d: %.300s", field, w.Code, w.Body)
			}
		})
	}
}
