package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// smallBody is a ~1 KB Messages request: a short system prompt, one tool,
// two turns.
func smallBody() []byte {
	return []byte(`{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,` +
		`"system":"You are a helpful assistant. Answer briefly and precisely, in the user's language.",` +
		`"tools":[{"name":"get_weather","description":"Current weather at a place, in metric units.",` +
		`"input_schema":{"type":"object","properties":{"city":{"type":"string","description":"City name"},` +
		`"country":{"type":"string","description":"ISO 3166 country code"}},"required":["city"]}}],` +
		`"messages":[{"role":"user","content":"` + prose(300) + `"},` +
		`{"role":"assistant","content":"` + prose(200) + `"},` +
		`{"role":"user","content":[{"type":"text","text":"And tomorrow, in Paris?","cache_control":{"type":"ephemeral"}}]}]}`)
}

// agentBody is a ~50 KB request shaped like a coding agent's: a large
// system prompt in text blocks, the last with cache_control, a dozen tools
// with JSON schemas, and a few messages including a tool call and result.
func agentBody() []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,"thinking":{"type":"adaptive"},`)
	b.WriteString(`"metadata":{"user_id":"user_2f9c_account_41_session_7"},"system":[`)
	b.WriteString(`{"type":"text","text":"You are an interactive coding agent."},`)
	b.WriteString(`{"type":"text","text":"` + prose(30000) + `","cache_control":{"type":"ephemeral"}}],"tools":[`)
	for i := range 12 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tool_%d","description":"%s","input_schema":{"type":"object","properties":{`, i, prose(700))
		for j := range 6 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"arg_%d":{"type":"string","description":"%s"}`, j, prose(60))
		}
		b.WriteString(`},"required":["arg_0"],"additionalProperties":false}`)
		if i == 11 {
			b.WriteString(`,"cache_control":{"type":"ephemeral"}`)
		}
		b.WriteByte('}')
	}
	b.WriteString(`],"messages":[{"role":"user","content":[{"type":"text","text":"` + prose(2000) + `"}]},`)
	b.WriteString(`{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"toolu_01","name":"tool_3","input":{"arg_0":"src/main.go"}}]},`)
	b.WriteString(`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"` + prose(3000) + `"},`)
	b.WriteString(`{"type":"text","text":"Go on.","cache_control":{"type":"ephemeral"}}]}]}`)
	return b.Bytes()
}

// prose is n bytes of JSON string content that reads like a prompt:
// words, punctuation, escaped newlines and quotes.
func prose(n int) string {
	words := strings.Fields(`the model reads each file before editing it and keeps changes small; when a test fails it says why \"exactly\" and fixes the cause.\n`)
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(words[i%len(words)])
		b.WriteByte(' ')
	}
	return b.String()[:n]
}

// inspectBefore is the proxy's inspect up to this package: one
// json.Unmarshal reading model and stream.
func inspectBefore(body []byte) (model string, stream bool, err error) {
	var info struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return "", false, ErrNotObject
	}
	if err := json.Unmarshal(trimmed, &info); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return "", false, err
		}
	}
	return info.Model, info.Stream, nil
}

// unmarshalRaw is the first step of the other way to build the
// descriptor: one json.Unmarshal keeping the prompt's parts raw, to be
// walked afterwards. Its cost is a floor for that way.
func unmarshalRaw(body []byte) error {
	var v struct {
		Model     string            `json:"model"`
		Stream    bool              `json:"stream"`
		MaxTokens int               `json:"max_tokens"`
		System    json.RawMessage   `json:"system"`
		Tools     []json.RawMessage `json:"tools"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		CacheControl json.RawMessage `json:"cache_control"`
	}
	return json.Unmarshal(body, &v)
}

func BenchmarkParse(b *testing.B) {
	h := http.Header{"X-Api-Key": {"sk-ant-api03-bench"}, "X-Stainless-Timeout": {"600"}}
	for _, tc := range []struct {
		name string
		body []byte
	}{{"1KB", smallBody()}, {"50KB", agentBody()}} {
		b.Run(tc.name+"/descriptor", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(tc.body, h); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/blocks", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := ParseBlocks(tc.body, h); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/inspect-before", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := inspectBefore(tc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/unmarshal-raw", func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := unmarshalRaw(tc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The benchmark bodies are what they claim to be.
func TestBenchBodies(t *testing.T) {
	small, agent := smallBody(), agentBody()
	if n := len(small); n < 900 || n > 1200 {
		t.Errorf("small body is %d bytes; want about 1 KB", n)
	}
	if n := len(agent); n < 45000 || n > 55000 {
		t.Errorf("agent body is %d bytes; want about 50 KB", n)
	}
	for _, body := range [][]byte{small, agent} {
		if !json.Valid(body) {
			t.Fatalf("not JSON: %s", body)
		}
	}
	if d, _ := Parse(agent, nil); len(d.Prefixes) != 3 {
		t.Errorf("agent body has %d prefixes; want 3 (tools, system, last message)", len(d.Prefixes))
	}
}
