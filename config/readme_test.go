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
