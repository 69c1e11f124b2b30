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

// --suite and --short refuse, before running anything, what they cannot do.
func TestBenchSuiteFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--short", "--quiet"}, "--short goes with --suite"},
		{[]string{"--suite", "--quiet"}, "--suite needs --out"},
		{[]string{"--suite", "--scenario", "noisy-neighbour-alone", "--out", dir}, "not one of the suite's scenarios"},
		{[]string{"--suite", "--scenario", "burst,nope", "--out", dir}, `"nope": not one of`},
		{[]string{"--suite", "--modes", "plain", "--out", dir}, "drop --modes"},
		{[]string{"--suite", "--repeat", "0", "--out", dir}, "--repeat 0"},
	} {
		start := time.Now()
		err := runBench(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("runBench(%v) = %v; want an error saying %q", tc.args, err, tc.want)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("runBench(%v) took %v: the refusal should come before any run", tc.args, d)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "thesis.tex"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runBench([]string{"--suite", "--short", "--quiet", "--out", dir}); err == nil || !strings.Contains(err.Error(), "thesis.tex") {
		t.Errorf("--suite into a foreign directory = %v; want a refusal naming thesis.tex", err)
	}
}
