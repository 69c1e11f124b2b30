package config

import (
	"os"
	"strings"
	"testing"
)

// settingsDoc is the page that shows the settings table.
const settingsDoc = "../docs/settings.md"

// The settings page's table is this package's table; this test keeps the
// two from drifting apart.
func TestSettingsDocShowsTheTable(t *testing.T) {
	page, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("SLUICE_WRITE_SETTINGS_TABLE") == "1" {
		// Regenerate it in place: the table runs from its header line to
		// the first line that is not a table row.
		head := "| Variable | Flag | Default | Meaning |\n"
		start := strings.Index(string(page), head)
		if start < 0 {
			t.Fatalf("%s has no settings table to rewrite", settingsDoc)
		}
		end := start
		for end < len(page) && page[end] == '|' {
			nl := strings.IndexByte(string(page[end:]), '\n')
			if nl < 0 {
				end = len(page)
				break
			}
			end += nl + 1
		}
		page = []byte(string(page[:start]) + MarkdownTable() + string(page[end:]))
		if err := os.WriteFile(settingsDoc, page, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if readme, err := os.ReadFile("../README.md"); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(readme), "| Variable | Flag | Default | Meaning |") {
		t.Errorf("README.md holds a settings table: it lives in %s alone (a second copy goes stale); link there instead", settingsDoc)
	}
	if !strings.Contains(string(page), MarkdownTable()) {
		t.Fatalf("%s's settings table differs from config.Settings; paste this (or run go test ./config/ with SLUICE_WRITE_SETTINGS_TABLE=1):\n%s", settingsDoc, MarkdownTable())
	}
}

// The settings page's example config file loads.
func TestSettingsDocConfigExampleLoads(t *testing.T) {
	page, err := os.ReadFile(settingsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "```toml\n")
	example, _, closed := strings.Cut(rest, "```")
	if !ok || !closed {
		t.Fatalf("%s has no ```toml example", settingsDoc)
	}
	c, err := Load(withFile(t, example), env(nil))
	if err != nil {
		t.Fatalf("the settings page's example: %v", err)
	}
	if !c.Enabled || c.MaxConcurrency != 16 {
		t.Errorf("the settings page's example loads as enabled %v, concurrency %d; want true, 16", c.Enabled, c.MaxConcurrency)
	}
}
