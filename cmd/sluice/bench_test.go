package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sluice bench --out refuses a directory with someone else's files in it,
// in one line and before it runs the scenario (the burst takes seconds).
func TestBenchOutRefusesAForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "thesis.tex"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := runBench([]string{"--scenario", "burst", "--quiet", "--out", dir})
	if err == nil || !strings.Contains(err.Error(), "thesis.tex") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("runBench = %v; want a one-line refusal naming thesis.tex", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the refusal took %v: it should come before the run", d)
	}
}
