package sim

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/catalog"
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

// thinkingReply is the part of a reply the thinking tests look at.
type thinkingReply struct {
	Content []struct {
		Type      string  `json:"type"`
		Text      string  `json:"text"`
		Thinking  *string `json:"thinking"`
		Signature string  `json:"signature"`
	} `json:"content"`
	StopReason string `json:"stop_reason"`
	Usage      struct {
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

func postThinking(t *testing.T, s *Server, body string, hdr ...string) thinkingReply {
	t.Helper()
	w := call(s, "POST", "/v1/messages", body, hdr...)
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	var r thinkingReply
	if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil {
		t.Fatalf("decode %s: %v", w.Body, err)
	}
	return r
}

func thinkingBody(maxTokens int, thinking, prompt string) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":` + strconv.Itoa(maxTokens) + `,"thinking":` + thinking +
		`,"messages":[{"role":"user","content":` + strconv.Quote(prompt) + `}]}`
}

func TestThinking(t *testing.T) {
	s := New(Config{})
	defer s.Close()

	t.Run("errors", func(t *testing.T) {
		for _, tt := range []struct{ thinking, msg string }{
			{`{"type":"enabled"}`, "budget_tokens"},
			{`{"type":"enabled","budget_tokens":500}`, "budget_tokens"},
			{`{"type":"enabled","budget_tokens":8192}`, "max_tokens"},
			{`{"type":"sometimes"}`, "thinking.type"},
			{`{}`, "thinking.type"},
			{`"adaptive"`, "thinking"},
			{`{"type":"adaptive","display":"loud"}`, "thinking.display"},
		} {
			wantError(t, call(s, "POST", "/v1/messages", thinkingBody(4096, tt.thinking, "x")), 400, "invalid_request_error", tt.msg)
		}
		// count_tokens takes no max_tokens, so the budget is checked only for its floor.
		body := `{"model":"m","thinking":{"type":"enabled","budget_tokens":9999},"messages":[{"role":"user","content":"x"}]}`
		if w := call(s, "POST", "/v1/messages/count_tokens", body); w.Code != 200 {
			t.Errorf("count_tokens with thinking: %d %s", w.Code, w.Body)
		}
	})

	t.Run("enabled", func(t *testing.T) {
		r := postThinking(t, s, thinkingBody(4096, `{"type":"enabled","budget_tokens":2048}`, "think first"), "x-sim-output-tokens", "10")
		if len(r.Content) != 2 || r.Content[0].Type != "thinking" || r.Content[1].Type != "text" {
			t.Fatalf("content %+v; want thinking then text", r.Content)
		}
		th := r.Content[0]
		if th.Thinking == nil || *th.Thinking == "" || th.Signature == "" {
			t.Errorf("thinking block %+v; want a thought and a signature", th)
		}
		if words := len(strings.Fields(*th.Thinking)); r.Usage.OutputTokens != words+10 {
			t.Errorf("output_tokens %d; want the thought's %d + the text's 10", r.Usage.OutputTokens, words)
		}
		omitted := postThinking(t, s, thinkingBody(4096, `{"type":"enabled","budget_tokens":2048,"display":"omitted"}`, "think first"), "x-sim-output-tokens", "10")
		if th := omitted.Content[0]; th.Type != "thinking" || th.Thinking == nil || *th.Thinking != "" || th.Signature == "" || omitted.Usage.OutputTokens <= 10 {
			t.Errorf("omitted thinking %+v, usage %+v; want an empty billed thought with a signature", th, omitted.Usage)
		}
	})

	t.Run("off", func(t *testing.T) {
		for _, thinking := range []string{`{"type":"disabled"}`, `{"type":"between_tools"}`, `null`} {
			r := postThinking(t, s, thinkingBody(4096, thinking, "no thought"))
			if len(r.Content) == 0 || r.Content[0].Type == "thinking" {
				t.Errorf("thinking %s: content %+v; want no thinking block", thinking, r.Content)
			}
		}
	})

	t.Run("adaptive", func(t *testing.T) {
		thought, plain := 0, 0
		for i := range 20 {
			r := postThinking(t, s, thinkingBody(4096, `{"type":"adaptive"}`, "question "+strconv.Itoa(i)))
			if r.Content[0].Type == "thinking" {
				thought++
			} else {
				plain++
			}
		}
		if thought == 0 || plain == 0 {
			t.Errorf("adaptive: %d replies thought, %d did not; want some of each", thought, plain)
		}
	})

	t.Run("cut by max_tokens", func(t *testing.T) {
		long := New(Config{OutputTokensMin: 500, OutputTokensMax: 500})
		defer long.Close()
		for i := range 20 {
			r := postThinking(t, long, thinkingBody(100, `{"type":"adaptive"}`, "question "+strconv.Itoa(i)))
			if r.Content[0].Type != "thinking" {
				continue
			}
			if len(r.Content) != 1 || r.StopReason != "max_tokens" || r.Usage.OutputTokens != 100 {
				t.Errorf("thought cut by max_tokens: %+v; want one thinking block, max_tokens, 100 tokens", r)
			}
			return
		}
		t.Fatal("no adaptive reply thought")
	})

	t.Run("streamed like JSON", func(t *testing.T) {
		for _, thinking := range []string{`{"type":"enabled","budget_tokens":2048}`, `{"type":"enabled","budget_tokens":2048,"display":"omitted"}`} {
			body := thinkingBody(4096, thinking, "stream a thought")
			r := postThinking(t, s, body)
			w := call(s, "POST", "/v1/messages", strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
			var thought, sig strings.Builder
			for _, line := range strings.Split(w.Body.String(), "\n") {
				data, ok := strings.CutPrefix(line, "data: ")
				if !ok {
					continue
				}
				var ev struct {
					Delta struct{ Type, Thinking, Signature string } `json:"delta"`
				}
				_ = json.Unmarshal([]byte(data), &ev)
				switch ev.Delta.Type {
				case "thinking_delta":
					thought.WriteString(ev.Delta.Thinking)
				case "signature_delta":
					sig.WriteString(ev.Delta.Signature)
				}
			}
			if thought.String() != *r.Content[0].Thinking || sig.String() != r.Content[0].Signature {
				t.Errorf("%s: streamed thought %q sig %q; want %q %q", thinking, thought.String(), sig.String(), *r.Content[0].Thinking, r.Content[0].Signature)
			}
			if !strings.Contains(w.Body.String(), `"content_block":{"type":"thinking","thinking":"","signature":""}`) {
				t.Errorf("%s: no thinking content_block_start in %.400s", thinking, w.Body)
			}
		}
	})
}

// Changing thinking invalidates the cached messages, not the cached tools
// and system prompt.
func TestThinkingAndCache(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	sys := strings.Repeat("rule ", 1000) // 1250 tokens
	body := func(thinking string) string {
		return `{"model":"claude-sonnet-4-5","max_tokens":4096,"thinking":` + thinking + `,
		"system":[{"type":"text","text":"` + sys + `","cache_control":{"type":"ephemeral"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"` + sys + `","cache_control":{"type":"ephemeral"}}]}]}`
	}
	decode(t, call(s, "POST", "/v1/messages", body(`{"type":"adaptive"}`)))
	if d := decode(t, call(s, "POST", "/v1/messages", body(`{"type":"adaptive"}`))); d.Usage.CacheRead != 2500 {
		t.Errorf("same thinking: %+v; want 2500 read", d.Usage)
	}
	if d := decode(t, call(s, "POST", "/v1/messages", body(`{"type":"enabled","budget_tokens":1024}`))); d.Usage.CacheRead != 1250 || d.Usage.CacheCreation != 1250 {
		t.Errorf("other thinking: %+v; want the system prompt read, the messages written", d.Usage)
	}
	// Absent and disabled thinking are the same prefix.
	decode(t, call(s, "POST", "/v1/messages", body(`null`)))
	if d := decode(t, call(s, "POST", "/v1/messages", body(`{"type":"disabled"}`))); d.Usage.CacheRead != 2500 {
		t.Errorf("disabled after absent: %+v; want 2500 read", d.Usage)
	}
}

// The model list has every model id the Go SDKs name, and each family's
// minimum cacheable length comes from the one table.
func TestCurrentModels(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	sdkModels := []string{ // the Model constants of anthropic-sdk-go v2.15 (v1.84 names a subset)
		"claude-fable-5-2", "claude-mythos-5-2", "claude-haiku-5-5", "claude-sonnet-5-5", "claude-fable-5-1",
		"claude-opus-5-5", "claude-mythos-5-1", "claude-sonnet-5", "claude-fable-5", "claude-mythos-5",
		"claude-opus-5", "claude-opus-4-8", "claude-opus-4-7", "claude-mythos-preview", "claude-opus-4-6",
		"claude-sonnet-4-6", "claude-haiku-4-5", "claude-haiku-4-5-20251001", "claude-opus-4-5",
		"claude-opus-4-5-20251101", "claude-sonnet-4-5", "claude-sonnet-4-5-20250929",
	}
	for _, id := range sdkModels {
		if w := call(s, "GET", "/v1/models/"+id, ""); w.Code != 200 {
			t.Errorf("GET /v1/models/%s: %d", id, w.Code)
		}
	}
	var list catalog.Page[model]
	if err := json.Unmarshal(call(s, "GET", "/v1/models?limit=1000", "").Body.Bytes(), &list); err != nil || len(list.Data) != len(models) {
		t.Fatalf("model list %+v (%v); want all %d", list, err, len(models))
	}
	for i := 1; i < len(list.Data); i++ {
		if list.Data[i].CreatedAt > list.Data[i-1].CreatedAt {
			t.Errorf("%s listed after the older %s; want newest first", list.Data[i].ID, list.Data[i-1].ID)
		}
	}

	for id, want := range map[string]int{
		"claude-opus-5-5": 512, "claude-fable-5-2": 512, "claude-sonnet-5-5": 1024, "claude-opus-4-8": 1024,
		"claude-opus-4-6": 4096, "claude-opus-4-5-20251101": 4096, "claude-haiku-4-5": 4096,
		"claude-sonnet-4-6": 1024, "claude-sonnet-4-5": 1024, "claude-opus-4-1": 1024,
		"claude-3-5-haiku-20241022": 2048, "some-future-model": 1024,
	} {
		if got := s.minCacheTokens(id); got != want {
			t.Errorf("minimum cacheable length of %s = %d; want %d", id, got, want)
		}
	}
	over := New(Config{MinCacheTokens: 100, MinCacheTokensHaiku: 200})
	defer over.Close()
	if a, b := over.minCacheTokens("claude-opus-4-6"), over.minCacheTokens("claude-haiku-4-5"); a != 100 || b != 200 {
		t.Errorf("overridden minimums %d, %d; want 100, 200", a, b)
	}
}

// claudeCodeBody is a request of the shape Claude Code 2.1.x sends, written
// from the public request format (no real prompt): a large system prompt as
// text blocks, the last with cache_control; a dozen tools with JSON
// schemas; a system turn between user turns, with a breakpoint on the last
// user block; adaptive thinking, output_config, context_management,
// metadata.user_id and max_tokens in the tens of thousands. About 50 KB.
func claudeCodeBody(stream bool) string {
	var tools []map[string]any
	for i, name := range []string{"Bash", "Read", "Write", "Edit", "Glob", "Grep", "Task", "TodoWrite",
		"WebFetch", "WebSearch", "NotebookEdit", "ExitPlanMode"} {
		tools = append(tools, map[string]any{
			"name":        name,
			"description": strings.Repeat("Describes what tool "+name+" does and when to use it. ", 20),
			"input_schema": map[string]any{
				"type":    "object",
				"$schema": "http://json-schema.org/draft-07/schema#",
				"properties": map[string]any{
					"path":        map[string]any{"type": "string", "description": "an absolute path"},
					"limit":       map[string]any{"type": "integer", "minimum": 1, "maximum": 2000},
					"mode":        map[string]any{"type": "string", "enum": []string{"fast", "full"}},
					"items":       map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
					"dry_run":     map[string]any{"type": "boolean"},
					"tool_number": map[string]any{"const": i},
				},
				"required":             []string{"path"},
				"additionalProperties": false,
			},
		})
	}
	req := map[string]any{
		"model":      "claude-sonnet-5-5",
		"max_tokens": 32000,
		"stream":     stream,
		"system": []map[string]any{
			{"type": "text", "text": "You are a coding agent working in a terminal."},
			{"type": "text", "text": strings.Repeat("Follow the house rules for editing files, running commands and reporting results. ", 300),
				"cache_control": map[string]any{"type": "ephemeral"}},
		},
		"tools": tools,
		"messages": []map[string]any{
			{"role": "user", "content": []map[string]any{{"type": "text", "text": "List the files in this project and summarise them."}}},
			{"role": "system", "content": []map[string]any{{"type": "text", "text": "Reminder: the working directory is /project; todo list is empty."}}},
			{"role": "user", "content": []map[string]any{{"type": "text", "text": "Start with the README.",
				"cache_control": map[string]any{"type": "ephemeral"}}}},
		},
		"thinking":           map[string]any{"type": "adaptive"},
		"output_config":      map[string]any{"effort": "high"},
		"context_management": map[string]any{"edits": []map[string]any{{"type": "clear_thinking_20251015", "keep": "all"}}},
		"metadata":           map[string]any{"user_id": "user_0f3a_account_1b2c_session_9d8e"},
	}
	b, _ := json.Marshal(req)
	return string(b)
}

// streamUsage is the usage of a stream's message_start.
func streamUsage(t *testing.T, body string) map[string]any {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || !strings.Contains(data, `"message_start"`) {
			continue
		}
		var ev struct {
			Message struct {
				Usage map[string]any `json:"usage"`
			} `json:"message"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("message_start %s: %v", data, err)
		}
		return ev.Message.Usage
	}
	t.Fatalf("no message_start in %.300s", body)
	return nil
}

func TestClaudeCodeRequest(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			s := New(Config{})
			defer s.Close()
			body := claudeCodeBody(stream)
			if len(body) < 40_000 {
				t.Fatalf("body is %d bytes; want a Claude Code sized one", len(body))
			}
			usage := func() map[string]any {
				w := call(s, "POST", "/v1/messages", body)
				if w.Code != 200 {
					t.Fatalf("status %d: %s", w.Code, w.Body)
				}
				if stream {
					if !strings.Contains(w.Body.String(), "event: message_stop") {
						t.Fatalf("stream did not end: %.300s", w.Body)
					}
					return streamUsage(t, w.Body.String())
				}
				var m struct {
					Usage map[string]any `json:"usage"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
					t.Fatalf("decode: %v", err)
				}
				return m.Usage
			}
			first, second := usage(), usage()
			if first["cache_creation_input_tokens"].(float64) == 0 || first["cache_read_input_tokens"].(float64) != 0 {
				t.Errorf("first request usage %v; want a cache write", first)
			}
			if second["cache_read_input_tokens"].(float64) == 0 || second["cache_read_input_tokens"] != first["cache_creation_input_tokens"] {
				t.Errorf("second request usage %v; want the first's write read back", second)
			}
			if total := countTokens(t, s, strings.Replace(body, `"max_tokens":32000,`, ``, 1)); float64(total) !=
				second["cache_read_input_tokens"].(float64)+second["input_tokens"].(float64) {
				t.Errorf("count_tokens %d; want read + uncached = %v", total, second)
			}
		})
	}
}
