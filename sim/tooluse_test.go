package sim

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"
)

// toolCallOf is the name and input of the tool call in a reply.
func toolCallOf(t *testing.T, body []byte) (string, string) {
	t.Helper()
	var m struct {
		Content []struct {
			Type  string          `json:"type"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		} `json:"content"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	for _, c := range m.Content {
		if c.Type == "tool_use" {
			return c.Name, string(c.Input)
		}
	}
	t.Fatalf("no tool call in %s", body)
	return "", ""
}

// toolTurn is a request offering Read, Grep and Glob whose conversation
// holds results tool results.
func toolTurn(results int) string {
	schema := `{"type":"object","properties":{"file_path":{"type":"string"},"pattern":{"type":"string"}}}`
	var tools []string
	for _, n := range []string{"Glob", "Grep", "Read"} {
		tools = append(tools, `{"name":"`+n+`","input_schema":`+schema+`}`)
	}
	msgs := []string{`{"role":"user","content":"look at the files"}`}
	for k := range results {
		id := `"toolu_` + string(rune('a'+k)) + `"`
		msgs = append(msgs,
			`{"role":"assistant","content":[{"type":"tool_use","id":`+id+`,"name":"Read","input":{}}]}`,
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":`+id+`,"content":"ok"}]}`)
	}
	return `{"model":"claude-sonnet-4-5","max_tokens":1024,"tools":[` + strings.Join(tools, ",") +
		`],"messages":[` + strings.Join(msgs, ",") + `]}`
}

// TestToolUseNamesAndInputs: ToolUseName's names are called in turn, one
// per tool result the conversation holds, and a tool with inputs in
// ToolUseInput gets them in turn instead of drawn ones.
func TestToolUseNamesAndInputs(t *testing.T) {
	var cfg Config
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	err := fs.Parse([]string{"--tool-use-share", "1", "--tool-use-name", "Read,Grep,Read",
		"--tool-use-input", `Read={"file_path": "README.md"}`, "--tool-use-input", `Read={"file_path":"go.mod"}`})
	if err != nil {
		t.Fatal(err)
	}
	s := New(cfg)
	defer s.Close()
	for k, want := range []struct{ name, input string }{
		{"Read", `{"file_path":"README.md"}`},
		{"Grep", ""}, // drawn from the schema
		{"Read", `{"file_path":"README.md"}`},
		{"Read", `{"file_path":"go.mod"}`},
	} {
		w := call(s, "POST", "/v1/messages", toolTurn(k))
		if w.Code != 200 {
			t.Fatalf("turn %d: %d %s", k, w.Code, w.Body)
		}
		name, input := toolCallOf(t, w.Body.Bytes())
		if name != want.name || (want.input != "" && input != want.input) {
			t.Errorf("with %d tool results: called %s with %s; want %s with %s", k, name, input, want.name, want.input)
		}
		if want.input == "" && strings.Contains(input, "README") {
			t.Errorf("with %d tool results: %s got Read's input %s", k, name, input)
		}
	}
	for _, bad := range []string{"Read", `Read=[1]`, `={"a":1}`, `Read={`} {
		if err := (*toolInputs)(&cfg.ToolUseInput).Set(bad); err == nil {
			t.Errorf("--tool-use-input %q accepted; want an error", bad)
		}
	}
}
