package bench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
)

// ShapeClaudeCode is the workload shape of real Claude Code requests.
const ShapeClaudeCode = "claude-code"

// claudeCodeTools are the names and sizes (in the simulator's tokens, ~4
// characters each) of the tools a Claude Code 2.1.332 agent of a fleet
// sends with its tools limited to Read, Glob and Grep (the multi-turn
// fleet of testdata/clients/fleet, docs/claude-code.md): five, the same in
// every agent's request. Their total with the identity line is the
// captured shared prefix (1,898 tokens read by every agent after the
// first); Read's, ToolSearch's and DeferredToolPlaceholder's sizes are
// those of testdata/clients/claude-code-first.body, Glob's and Grep's
// split of the rest is not in the captures (they hold usage, not bodies).
var claudeCodeTools = []struct {
	name   string
	tokens int
}{
	{"Glob", 290}, {"Grep", 589}, {"Read", 494}, {"DeferredToolPlaceholder", 54}, {"ToolSearch", 369},
}

// The sizes of the request's other blocks, in tokens: together with the
// attribution line and the task they are what each agent of the captured
// fleet writes of its own on its first turn (about 2,058 tokens). Their
// split follows the single-turn capture's proportions (main prompt 1,766,
// reminder 156, environment 2,373 with all tools offered); the fleet's
// captures give only the total.
const (
	ccMainPromptTokens = 830  // system[2], the main prompt
	ccReminderTokens   = 73   // messages[0]'s first block, a system-reminder
	ccEnvTokens        = 1124 // messages[1], the system-role turn with the environment
)

// claudeCodeShape builds the requests of a claude-code workload. An agent
// is a session of the workload (or, without turns, one request).
type claudeCodeShape struct {
	seed   int64
	prompt [2]int // the range of a tool result's tokens
	tools  []map[string]any
}

func newClaudeCodeShape(seed int64, prompt [2]int) *claudeCodeShape {
	s := &claudeCodeShape{seed: seed, prompt: prompt}
	s.prompt[0], s.prompt[1] = rangeOr(prompt, 200, 2000)
	for _, t := range claudeCodeTools {
		s.tools = append(s.tools, map[string]any{
			"name":        t.name,
			"description": filler(fmt.Sprintf("The %s tool. ", t.name), max(t.tokens-30, 8)),
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{
				"file_path": map[string]any{"type": "string", "description": "the file to act on"}}, "required": []string{"file_path"}},
		})
	}
	return s
}

// agent is the agent that sends request id.
func (s *claudeCodeShape) agent(id int, a Arrival) int {
	if a.Turns > 1 {
		return a.Session
	}
	return id
}

// attribution is the agent's attribution line, as Claude Code 2.1.332
// sends it first in system: its three hex digits are computed from the
// request's content, so they differ between agents with different tasks
// and stay within a session. Multiplying by an odd number is a bijection
// modulo 4096, so no two of the first 4096 agents share a line.
func (s *claudeCodeShape) attribution(agent int) string {
	h := (uint64(agent)*0x9e5 + uint64(s.seed)*0x3b) & 0xfff
	return fmt.Sprintf("x-anthropic-billing-header: cc_version=2.1.332.%03x; cc_entrypoint=sdk-cli;", h)
}

// workDir is the agent's working directory: each agent of a fleet works
// in a directory (a worktree, a HOME) of its own, which Claude Code names
// in the main prompt (its memory directory) and in the environment turn.
func workDir(agent int) string { return fmt.Sprintf("/home/dev/fleet/agent-%d/work", agent) }

// toolResultTokens is the size of the result of the agent's turn'th tool
// call: drawn from the agent and turn alone, so every later turn repeats
// it byte for byte.
func (s *claudeCodeShape) toolResultTokens(agent, turn int) int {
	rng := rand.New(rand.NewPCG(uint64(s.seed), uint64(agent)<<16|uint64(turn)))
	return s.prompt[0] + rng.IntN(s.prompt[1]-s.prompt[0]+1)
}

var ephemeral = map[string]string{"type": "ephemeral"}

// body is request id's body: the captured Claude Code request's structure
// with synthetic text of the captured sizes. Turn n+1 is turn n with the
// assistant's reply (a text and a tool call) and the tool's result added,
// the breakpoint moved from the environment turn (sent as a plain string
// from then on, as captured) to the result.
func (s *claudeCodeShape) body(model string, id int, a Arrival) []byte {
	agent := s.agent(id, a)
	dir := workDir(agent)
	session := sessionID(s.seed, agent)
	system := []map[string]any{
		{"type": "text", "text": s.attribution(agent)}, // no cache_control, as captured
		{"type": "text", "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK.", "cache_control": ephemeral},
		{"type": "text", "text": filler("\nYou are an agent working with the user toward their goals. You have a persistent file-based memory at "+dir+"/.claude/memory/. ", ccMainPromptTokens), "cache_control": ephemeral},
	}
	env := filler("# Environment\nYou have been invoked in the following environment: \n - Primary working directory: "+dir+"\n - Platform: linux\n", ccEnvTokens)
	user := map[string]any{"role": "user", "content": []map[string]any{
		{"type": "text", "text": filler("<system-reminder>\nAttribution for git commits and pull requests you create from here on. ", ccReminderTokens)},
		{"type": "text", "text": fmt.Sprintf("Task %d: look at the files in the working directory and fix what the tests report.", agent)},
	}}
	msgs := []map[string]any{user}
	if a.Turn == 0 {
		msgs = append(msgs, map[string]any{"role": "system", "content": []map[string]any{{"type": "text", "text": env, "cache_control": ephemeral}}})
	} else {
		msgs = append(msgs, map[string]any{"role": "system", "content": env})
	}
	for k := range a.Turn {
		use := fmt.Sprintf("toolu_bench_%d_%d", agent, k)
		result := map[string]any{"type": "tool_result", "tool_use_id": use,
			"content": filler(fmt.Sprintf("agent %d tool result %d: ", agent, k), s.toolResultTokens(agent, k))}
		if k == a.Turn-1 {
			result["cache_control"] = ephemeral
		}
		msgs = append(msgs,
			map[string]any{"role": "assistant", "content": []map[string]any{
				{"type": "text", "text": fmt.Sprintf("Reading file %d.", k)},
				{"type": "tool_use", "id": use, "name": "Read", "input": map[string]any{"file_path": fmt.Sprintf("%s/file%d.go", dir, k)}},
			}},
			map[string]any{"role": "user", "content": []map[string]any{result}})
	}
	user0, _ := json.Marshal(map[string]string{"device_id": fmt.Sprintf("%064x", agent+1), "account_uuid": "", "session_id": session})
	body, _ := json.Marshal(map[string]any{
		"model":              model,
		"messages":           msgs,
		"system":             system,
		"tools":              s.tools,
		"metadata":           map[string]string{"user_id": string(user0)},
		"max_tokens":         128000,
		"thinking":           map[string]string{"type": "adaptive", "display": "omitted"},
		"context_management": map[string]any{"edits": []map[string]string{{"type": "clear_thinking_20251015", "keep": "all"}}},
		"output_config":      map[string]string{"effort": "medium"},
		"stream":             a.Stream,
	})
	return body
}

// setHeaders adds the headers by which Claude Code names its session.
func (s *claudeCodeShape) setHeaders(req *http.Request, id int, a Arrival) {
	req.Header.Set("X-Claude-Code-Session-Id", sessionID(s.seed, s.agent(id, a)))
	req.Header.Set("X-App", "cli")
}

func sessionID(seed int64, agent int) string {
	return fmt.Sprintf("00000000-%04x-4000-8000-%012x", uint16(seed), agent)
}
