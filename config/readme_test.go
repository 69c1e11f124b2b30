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
	if os.Getenv("SLUICE_WRITE_README_TABLE") == "1" {
		// Regenerate it in place: the table runs from its header line to
		// the first line that is not a table row.
		head := "| Variable | Flag | Default | Meaning |\n"
		start := strings.Index(string(readme), head)
		if start < 0 {
			t.Fatal("README.md has no settings table to rewrite")
		}
		end := start
		for end < len(readme) && readme[end] == '|' {
			nl := strings.IndexByte(string(readme[end:]), '\n')
			if nl < 0 {
				end = len(readme)
				break
			}
			end += nl + 1
		}
		readme = []byte(string(readme[:start]) + MarkdownTable() + string(readme[end:]))
		if err := os.WriteFile("../README.md", readme, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(string(readme), MarkdownTable()) {
		t.Fatalf("README.md's settings table differs from config.Settings; paste this (or run it with SLUICE_WRITE_README_TABLE=1):\n%s", MarkdownTable())
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
