package config

import (
	"os"
	"strings"
	"testing"
)

// The README's settings table is this package's table; this test keeps the
// two from drifting apart.
func TestREADMEShowsTheSettingsTable(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), MarkdownTable()) {
		t.Fatalf("README.md's settings table differs from config.Settings; paste this:\n%s", MarkdownTable())
	}
}

// The README's example config file loads.
func TestREADMEConfigFileExampleLoads(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```toml\n")
	example, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatal("README.md has no ```toml example")
	}
	c, err := Load(withFile(t, example), env(nil))
	if err != nil {
		t.Fatalf("the README's example: %v", err)
	}
	if !c.Enabled || c.MaxConcurrency != 16 {
		t.Errorf("the README's example loads as enabled %v, concurrency %d; want true, 16", c.Enabled, c.MaxConcurrency)
	}
}
