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

// A scenario of variants only, with no plain to judge against, prints its
// own verdict line after the table.
func TestBenchScenarioOfVariantsPrintsItsVerdict(t *testing.T) {
	dir := t.TempDir()
	sc := filepath.Join(dir, "fo.json")
	js := `{"name":"fo","modes":["one-backend","two-backends"],"verdict":"failover","client":{"max_retries":0},
		"sim":{"ttft":"5ms","outages":[{"from":"0s","to":"1h","backend":"primary"}]},
		"workload":{"kind":"burst","n":2,"duration":"20ms","prompt_tokens":[10,10],"output_tokens":[4,4]},
		"variants":[{"name":"one-backend","sluice":{"backends":[{"name":"primary","keys":["env:P"]}],"timeout":"1s"}},
		            {"name":"two-backends","sluice":{"backends":[{"name":"primary","keys":["env:P"]},{"name":"secondary","keys":["env:S"]}]}}]}`
	if err := os.WriteFile(sc, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = out
	err = runBench([]string{"--scenario", sc, "--quiet"})
	os.Stdout = stdout
	out.Close()
	if err != nil {
		t.Fatal(err)
	}
	printed, _ := os.ReadFile(out.Name())
	if !strings.Contains(string(printed), "\ntwo-backends wins vs one-backend: served 100% vs 0%") {
		t.Errorf("no failover verdict line in:\n%s", printed)
	}
}
