package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/bench/overhead"
	"github.com/sluicehq/sluice/internal/sluicebin"
)

// TestOverheadShort runs `sluice bench --overhead --short` as a user
// would, the built command in a process of its own, and checks what its
// report must hold whatever the machine's speed: every path measured in
// every phase without an error (the go-proxy yardstick among them), direct
// as the yardstick of itself, a CPU cost for each proxy, and the table. HAProxy is measured when it is on
// PATH; in CI (.ci/run installs it) its absence is a failure.
func TestOverheadShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and runs it for a few seconds")
	}
	_, err := exec.LookPath("haproxy")
	haveHAProxy := err == nil
	if !haveHAProxy && os.Getenv("CI") != "" {
		t.Fatal("haproxy is not on PATH (apt-get install haproxy); in CI the overhead benchmark must measure it")
	}
	dir := t.TempDir()
	bin := sluicebin.Path(t)
	md, js := filepath.Join(dir, "overhead.md"), filepath.Join(dir, "overhead.json")
	out, err := exec.Command(bin, "bench", "--overhead", "--short", "--quiet", "--markdown", md, "--json", js).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice bench --overhead --short: %v\n%s", err, out)
	}
	rep := readReport(t, js)
	want := []string{overhead.Direct, overhead.GoProxy, overhead.Plain, overhead.Windowed}
	if haveHAProxy {
		want = []string{overhead.Direct, overhead.HAProxy, overhead.GoProxy, overhead.Plain, overhead.Windowed}
		if !strings.HasPrefix(rep.HAProxy, "HAProxy version") {
			t.Errorf("haproxy on PATH, but the report says %q", rep.HAProxy)
		}
	} else if !strings.Contains(rep.HAProxy, "skipped") {
		t.Errorf("no haproxy, but the report says %q", rep.HAProxy)
	}
	if len(rep.Rows) != len(want) {
		t.Fatalf("rows %+v, want one for each of %v", rep.Rows, want)
	}
	if n := rep.Rounds * 3 * len(want); len(rep.Runs) != n {
		t.Errorf("%d measurements, want %d (rounds × phases × paths)", len(rep.Runs), n)
	}
	for i, row := range rep.Rows {
		if row.Path != want[i] {
			t.Errorf("row %d is %s, want %s", i, row.Path, want[i])
		}
		if row.Errors != 0 {
			t.Errorf("%s: %d errors", row.Path, row.Errors)
		}
		if row.P50 <= 0 || row.P99 < row.P50 || row.RPS <= 0 || row.EventsPerSecond <= 0 {
			t.Errorf("%s: p50 %v, p99 %v, %v req/s, %v events/s: want positive, p99 ≥ p50", row.Path, row.P50, row.P99, row.RPS, row.EventsPerSecond)
		}
		if row.Path == overhead.Direct {
			if row.VsDirect != 1 || row.AddedP50 != 0 || row.CPUPer1000 != 0 {
				t.Errorf("direct against itself: %+v", row)
			}
			continue
		}
		if row.CPUPer1000 <= 0 || row.EventsPerCPUSecond <= 0 {
			t.Errorf("%s: CPU %v s per 1,000, %v events per CPU-second: a proxy's CPU went unseen", row.Path, row.CPUPer1000, row.EventsPerCPUSecond)
		}
		if haveHAProxy && row.CPUVsHAProxy <= 0 {
			t.Errorf("%s: no CPU ratio to HAProxy", row.Path)
		}
	}
	table, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range want {
		if !strings.Contains(string(table), "\n| "+p+" | ") {
			t.Errorf("the table has no row for %s:\n%s", p, table)
		}
	}
	if !strings.Contains(string(table), "load average") || !strings.Contains(string(out), "| path |") {
		t.Errorf("the table or its load average is missing from the output:\n%s", out)
	}
}

// TestOverheadLongStreamsShort runs `sluice bench --overhead --long-streams
// --short`: every path relays every paced stream whole, and each proxy's
// memory per open stream is measured (and sluice's goroutines).
func TestOverheadLongStreamsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds sluice and runs it for a few seconds")
	}
	js := filepath.Join(t.TempDir(), "long.json")
	out, err := exec.Command(sluicebin.Path(t), "bench", "--overhead", "--long-streams", "--short", "--quiet", "--json", js).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice bench --overhead --long-streams --short: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "| RSS per open stream |") {
		t.Errorf("no long-stream table in:\n%s", out)
	}
	rep := readReport(t, js)
	if rep.Long == nil || rep.Cap != rep.Streams || len(rep.Runs) != rep.Rounds*len(rep.Rows) {
		t.Fatalf("pace %+v, cap %d for %d streams, %d runs for %d rows", rep.Long, rep.Cap, rep.Streams, len(rep.Runs), len(rep.Rows))
	}
	for _, row := range rep.Rows {
		if row.Errors != 0 || row.EventsPerSecond <= 0 {
			t.Errorf("%s: %d errors, %v events/s", row.Path, row.Errors, row.EventsPerSecond)
		}
		switch row.Path {
		case overhead.Direct:
		case overhead.Plain, overhead.Windowed:
			if row.GoroutinesPerStream <= 0 || row.EventsPerCPUSecond <= 0 {
				t.Errorf("%s: %v goroutines per stream, %v events per CPU-second", row.Path, row.GoroutinesPerStream, row.EventsPerCPUSecond)
			}
		default:
			if row.EventsPerCPUSecond <= 0 {
				t.Errorf("%s: its CPU went unseen", row.Path)
			}
		}
	}
}

// readReport reads the report `sluice bench --overhead --json` wrote.
func readReport(t *testing.T, file string) overhead.Report {
	t.Helper()
	var rep overhead.Report
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}
