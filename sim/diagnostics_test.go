package sim

import (
	"encoding/json"
	"strings"
	"testing"
)

// diagBody is convo with a diagnostics member naming prev ("" for null).
func diagBody(body, prev string) string {
	id := "null"
	if prev != "" {
		id = `"` + prev + `"`
	}
	return strings.Replace(body, `{"model":`, `{"diagnostics":{"previous_message_id":`+id+`},"model":`, 1)
}

// diagOf sends body and returns its response id and diagnostics member
// ("absent" when there is none).
func diagOf(t *testing.T, s *Server, body string, hdr ...string) (string, string) {
	t.Helper()
	w := call(s, "POST", "/v1/messages", body, hdr...)
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	var id string
	_ = json.Unmarshal(m["id"], &id)
	d, ok := m["diagnostics"]
	if !ok {
		return id, "absent"
	}
	return id, string(d)
}

// Cache diagnostics as the cache-diagnostics page documents them: null on
// the first turn and when the history only grew, the first divergence
// otherwise, previous_message_not_found for an id with no fingerprint in
// the caller's workspace, unavailable when another prompt-shaping
// parameter changed; nothing at all without the diagnostics object.
func TestCacheDiagnostics(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	turn1 := convo("", userText("Read the README.", bp))
	id1, d := diagOf(t, s, diagBody(turn1, ""))
	if d != "null" {
		t.Errorf("first turn: diagnostics %s; want null", d)
	}
	grown := convo("", userText("Read the README.", ""), asstText("It says hello."), userText("Summarise it.", bp))
	id2, d := diagOf(t, s, diagBody(grown, id1))
	if d != "null" {
		t.Errorf("history only grew: diagnostics %s; want null", d)
	}
	tokens := map[string]int{}
	for _, c := range []struct {
		name, body string
		hdr        []string
		want       string // the reason's type, and whether tokens are named
		tokens     bool
	}{
		{"model", strings.Replace(grown, "claude-sonnet-4-5", "claude-opus-4-1", 1), nil, "model_changed", true},
		{"system", strings.Replace(grown, "rule ", "rules", 1), nil, "system_changed", true},
		{"tools", strings.Replace(grown, `"system":`, `"tools":[{"name":"Read","input_schema":{"type":"object"}}],"system":`, 1), nil, "tools_changed", true},
		{"an earlier message", strings.Replace(grown, "It says hello.", "It says goodbye.", 1), nil, "messages_changed", true},
		{"a message dropped", convo("", userText("Read the README.", bp)), nil, "messages_changed", true},
		{"tool_choice", strings.Replace(grown, `"system":`, `"tool_choice":{"type":"none"},"system":`, 1), nil, "unavailable", false},
		{"the beta set", grown, []string{"anthropic-beta", "context-1m-2025-08-07"}, "unavailable", false},
		{"another workspace", grown, []string{"x-api-key", "sk-other"}, "previous_message_not_found", false},
	} {
		_, d := diagOf(t, s, diagBody(c.body, id2), c.hdr...)
		var got struct {
			Reason *struct {
				Type   string `json:"type"`
				Tokens *int   `json:"cache_missed_input_tokens"`
			} `json:"cache_miss_reason"`
		}
		if err := json.Unmarshal([]byte(d), &got); err != nil || got.Reason == nil || got.Reason.Type != c.want ||
			(got.Reason.Tokens != nil) != c.tokens || (c.tokens && *got.Reason.Tokens <= 0) {
			t.Errorf("%s changed: diagnostics %s; want cache_miss_reason %s (tokens named: %v)", c.name, d, c.want, c.tokens)
			continue
		}
		if c.tokens {
			tokens[c.name] = *got.Reason.Tokens
		}
	}
	// What is missed runs from the divergence on: all of it for the model,
	// less for a message after the system prompt.
	if !(tokens["model"] == tokens["tools"] && tokens["model"] >= tokens["system"] && tokens["system"] > tokens["an earlier message"]) {
		t.Errorf("cache_missed_input_tokens %v; want model = tools >= system > an earlier message", tokens)
	}
	if _, d := diagOf(t, s, diagBody(grown, "msg_unknown")); !strings.Contains(d, `"previous_message_not_found"`) {
		t.Errorf("unknown id: %s; want previous_message_not_found", d)
	}
	// A request without the object keeps no fingerprint and gets no member.
	id3, d := diagOf(t, s, grown)
	if d != "absent" {
		t.Errorf("no diagnostics object: member %s; want none", d)
	}
	if _, d := diagOf(t, s, diagBody(grown, id3)); !strings.Contains(d, `"previous_message_not_found"`) {
		t.Errorf("previous request sent no diagnostics object: %s; want previous_message_not_found", d)
	}
	// Streamed, the member rides in message_start.
	w := call(s, "POST", "/v1/messages", strings.Replace(diagBody(grown, id2), `"max_tokens":50,`, `"max_tokens":50,"stream":true,`, 1))
	if start, _, _ := strings.Cut(w.Body.String(), "event: content_block_start"); !strings.Contains(start, `"diagnostics":null`) {
		t.Errorf("stream: message_start %s; want diagnostics null in it", start)
	}
	for _, bad := range []string{`"diagnostics":[]`, `"diagnostics":{"previous_message_id":7}`, `"diagnostics":{"previous_message_id":""}`} {
		wantError(t, call(s, "POST", "/v1/messages", strings.Replace(grown, `{"model":`, "{"+bad+`,"model":`, 1)), 400, "invalid_request_error", "diagnostics")
	}
}
