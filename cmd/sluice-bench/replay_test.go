package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/record"
)

// sluice bench --replay FILE replays a recording through plain and
// windowed and prints the replay's verdict line.
func TestBenchReplayPrintsTheVerdict(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.jsonl")
	rc, err := record.Open(record.Config{Path: path, MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":64,"system":[{"type":"text","text":"` + strings.Repeat("shared ", 800) +
		`","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`)
	at := time.Now()
	for i := range 4 {
		rc.Add(&record.Exchange{Arrival: at.Add(time.Duration(i) * time.Millisecond), Body: body, Key: "k", Model: "claude-sonnet-4-5", MaxTokens: 64, Status: 200,
			Usage: &record.Usage{Output: 8}})
	}
	rc.Close()
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = out
	err = runBench([]string{"--replay", path, "--quiet", "--ttft", "10ms", "--per-token", "1ms"})
	os.Stdout = stdout
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	printed, _ := os.ReadFile(out.Name())
	if !strings.Contains(string(printed), "replay           windowed ") || !strings.Contains(string(printed), "input cost") {
		t.Errorf("no replay verdict line in:\n%s", printed)
	}
	if err := runBench([]string{"--replay", filepath.Join(dir, "none.jsonl"), "--quiet"}); err == nil {
		t.Error("a missing recording replayed without an error")
	}
}
