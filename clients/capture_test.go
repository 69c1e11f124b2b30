package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluicehq/sluice/sim"
)

// recordingSim serves a fast simulator that records every API request to
// dir, and returns its base URL.
func recordingSim(t *testing.T, cfg sim.Config, dir string) string {
	t.Helper()
	cfg.RecordDir = dir
	s := sim.New(cfg)
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	return up.URL
}

// claudeEnv is the environment Claude Code runs in for these tests: its
// own HOME, the base URL, a key the simulator takes, no telemetry or
// updates. extra adds to it.
func claudeEnv(home, base string, extra ...string) []string {
	return append(append(os.Environ(), "HOME="+home, "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=sk-claude-code",
		"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1"), extra...)
}

// claudeResult is what `claude -p --output-format json` prints last.
type claudeResult struct {
	Type    string `json:"type"`
	Subtype string `json:"subtype"`
	IsError bool   `json:"is_error"`
	Result  string `json:"result"`
	NumTurn int    `json:"num_turns"`
}

// runClaude runs one non-interactive Claude Code prompt in its own HOME
// and working folder against base, and returns its result.
func runClaude(ctx context.Context, bin, base, prompt string, extra ...string) (claudeResult, string, error) {
	return runClaudeIn(ctx, bin, base, prompt, nil, extra...)
}

// runClaudeIn is runClaude with prepare run on the working folder first.
func runClaudeIn(ctx context.Context, bin, base, prompt string, prepare func(work string) error, extra ...string) (claudeResult, string, error) {
	home, err := os.MkdirTemp("", "sluice-claude-home-")
	if err != nil {
		return claudeResult{}, "", err
	}
	defer os.RemoveAll(home)
	return runClaudeAt(ctx, bin, base, home, prompt, prepare, extra...)
}

// runClaudeHome is runClaude with HOME at home, which the caller keeps
// (to read what Claude Code wrote there).
func runClaudeHome(ctx context.Context, bin, base, home, prompt string, extra ...string) (claudeResult, string, error) {
	return runClaudeAt(ctx, bin, base, home, prompt, nil, extra...)
}

func runClaudeAt(ctx context.Context, bin, base, home, prompt string, prepare func(work string) error, extra ...string) (claudeResult, string, error) {
	work := filepath.Join(home, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		return claudeResult{}, "", err
	}
	if prepare != nil {
		if err := prepare(work); err != nil {
			return claudeResult{}, "", err
		}
	}
	cmd := exec.CommandContext(ctx, bin, "-p", prompt, "--output-format", "json")
	cmd.Dir = work
	cmd.Env = claudeEnv(home, base, extra...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return claudeResult{}, string(out) + stderr.String(), err
	}
	var res claudeResult
	if err := json.Unmarshal(out, &res); err != nil {
		return res, string(out), err
	}
	return res, string(out), nil
}

// recorded is one request a recording simulator wrote.
type recorded struct {
	head sim.RecordedRequest
	body []byte
}

func readRecorded(t *testing.T, dir string) []recorded {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.request.json"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	var out []recorded
	for _, n := range names {
		var r recorded
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &r.head); err != nil {
			t.Fatal(err)
		}
		if r.body, err = os.ReadFile(strings.TrimSuffix(n, ".request.json") + ".body"); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// fixtureDir is where the captured requests live, beside the module's
// other packages: request, sim and dispatch tests read them.
const fixtureDir = "../testdata/clients"

// TestCapture re-captures the real-client fixtures in testdata/clients from
// the pinned clients (clients/package-lock.json) against a recording
// simulator:
//
//	npm ci --prefix clients && SLUICE_RECAPTURE=1 go test ./clients -run Capture
//
// Claude Code runs two one-line tasks, each with one tool call (the
// simulator's ToolUseShare 1, ToolUseMax 1), so the fixtures hold a
// session's first request and its later turn with the tool result, and the
// first request of another task; a third task's one call is to the Agent
// tool, and its subagent's first request is kept; the TypeScript SDK runs sdk-check.mjs;
// the Go SDK sends one request with a cached system prompt.
// Credential headers are never written (sim's recorder drops them). Then
// `git diff testdata/` shows what a new release changed, and the request,
// sim and dispatch tests say whether sluice still groups it.
func TestCapture(t *testing.T) {
	if os.Getenv("SLUICE_RECAPTURE") == "" {
		t.Skip("SLUICE_RECAPTURE=1 re-captures testdata/clients")
	}
	requireClients(t)
	bin := claudeBinary(t)
	if err := os.MkdirAll(fixtureDir, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := func(r recorded, name string) {
		t.Helper()
		head, err := json.MarshalIndent(r.head, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Join(fixtureDir, name)
		if err := os.WriteFile(base+".request.json", append(head, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(base+".body", r.body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	messages := func(rs []recorded) []recorded {
		var out []recorded
		for _, r := range rs {
			if r.head.Method == "POST" && r.head.Path == "/v1/messages" {
				out = append(out, r)
			}
		}
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for i, task := range []string{"List the files here and say how many there are.", "Write a haiku about rivers."} {
		dir := t.TempDir()
		base := recordingSim(t, sim.Config{Seed: 1, ToolUseShare: 1, ToolUseMax: 1}, dir)
		res, out, err := runClaude(ctx, bin, base, task)
		if err != nil || res.Subtype != "success" {
			t.Fatalf("claude -p %q: %v %+v\n%.2000s", task, err, res, out)
		}
		rs := messages(readRecorded(t, dir))
		if len(rs) < 2 {
			t.Fatalf("task %q: %d Messages requests recorded; want the first and the turn with the tool result", task, len(rs))
		}
		if i == 0 {
			keep(rs[0], "claude-code-first")
			keep(rs[1], "claude-code-tool-result")
		} else {
			keep(rs[0], "claude-code-first-other-task")
		}
	}
	// A subagent: the simulator's one tool call is to the Agent tool, and
	// the subagent's first request (its own header x-claude-code-agent-id,
	// its own tools and attribution line) is kept. The simulator's input
	// for the Agent tool is drawn from its schema and the request, so it
	// may ask for what Claude Code refuses (a model it lacks; a worktree,
	// which it makes only in a repository with a commit): up to four tries.
	gitRepo := func(work string) error {
		for _, args := range [][]string{{"init", "-q"}, {"-c", "user.name=sluice", "-c", "user.email=sluice@localhost", "commit", "-q", "--allow-empty", "-m", "start"}} {
			cmd := exec.CommandContext(ctx, "git", args...)
			cmd.Dir = work
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("git %s: %v\n%s", args[0], err, out)
			}
		}
		return nil
	}
	var sub []recorded
	for try := 0; try < 4 && len(sub) == 0; try++ {
		dir := t.TempDir()
		base := recordingSim(t, sim.Config{Seed: int64(1 + try), ToolUseShare: 1, ToolUseMax: 1, ToolUseName: "Agent"}, dir)
		if res, out, err := runClaudeIn(ctx, bin, base, "Use a subagent to list the files here.", gitRepo); err != nil || res.Subtype != "success" {
			t.Fatalf("claude -p with a subagent: %v %+v\n%.2000s", err, res, out)
		}
		for _, r := range messages(readRecorded(t, dir)) {
			if len(r.head.Header["x-claude-code-agent-id"]) > 0 {
				sub = append(sub, r)
			}
		}
	}
	if len(sub) == 0 {
		t.Fatal("no request of a subagent recorded in four tries (none with x-claude-code-agent-id)")
	}
	keep(sub[0], "claude-code-subagent")

	dir := t.TempDir()
	base := recordingSim(t, sim.Config{Seed: 1}, dir)
	cmd := exec.CommandContext(ctx, "node", "sdk-check.mjs")
	cmd.Env = append(os.Environ(), "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=sk-ts-sdk")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sdk-check.mjs: %v\n%s", err, out)
	}
	rs := messages(readRecorded(t, dir))
	var cached []recorded
	for _, r := range rs {
		if strings.Contains(string(r.body), `"cache_control"`) {
			cached = append(cached, r)
		}
	}
	if len(rs) == 0 || len(cached) == 0 {
		t.Fatalf("sdk-check.mjs: %d Messages requests, %d with cache_control; want both", len(rs), len(cached))
	}
	keep(rs[0], "sdk-ts-message")
	keep(cached[0], "sdk-ts-cached")

	// The official Go SDK (the v1 module go.mod pins): one request with
	// tools, a cached system prompt and a user turn.
	dir = t.TempDir()
	base = recordingSim(t, sim.Config{Seed: 1}, dir)
	client := anthropic.NewClient(option.WithAPIKey("sk-go-sdk"), option.WithBaseURL(base))
	_, err := client.Messages.New(ctx, anthropic.MessageNewParams{
		Model:     anthropic.ModelClaudeSonnet4_5,
		MaxTokens: 1024,
		System: []anthropic.TextBlockParam{{Text: strings.Repeat("You are a careful assistant. ", 400),
			CacheControl: anthropic.NewCacheControlEphemeralParam()}},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))},
	})
	if err != nil {
		t.Fatalf("Go SDK: %v", err)
	}
	rs = messages(readRecorded(t, dir))
	if len(rs) != 1 {
		t.Fatalf("Go SDK: %d Messages requests recorded; want 1", len(rs))
	}
	keep(rs[0], "sdk-go-cached")
}
