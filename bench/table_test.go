package bench

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestTableRowsOnce checks that the table leaves out rows that would only
// repeat another for this run, keeps them when they differ, and ends with
// the verdict line.
func TestTableRowsOnce(t *testing.T) {
	p := fig(ModePlain, 24.85, 2337, 2576, 1235, 1408, 64, 0, 0.2769)
	w := fig(ModeWindowed, 11.95, 2808, 5356, 2551, 4886, 8, 0, 0.2769)
	p.LatencyMS.Max, w.LatencyMS.Max = p.LatencyMS.P99, w.LatencyMS.P99
	r := &Report{Scenario: "t", Modes: []ModeReport{{Mode: ModeDirect}, p, w}}
	var b strings.Builder
	r.WriteTable(&b)
	out := b.String()
	for _, gone := range []string{"latency max", "all-requests p99", "10ms samples", "peak gate slots held", "cache write", "input cost"} {
		if strings.Contains(out, gone) {
			t.Errorf("table has %q, which only repeats another row here:\n%s", gone, out)
		}
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		name := strings.TrimSpace(strings.SplitN(strings.TrimSpace(line), "  ", 2)[0])
		if name != "" && seen[name] {
			t.Errorf("row %q twice:\n%s", name, out)
		}
		seen[name] = true
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "verdict, windowed vs plain") {
		t.Errorf("last line %q; want the verdict", last)
	}
	if !regexp.MustCompile(`peak queued in sluice +- `).MatchString(out) {
		t.Errorf("direct mode's queue should be -, not 0:\n%s", out)
	}

	// When they differ, they are shown.
	r.Modes[2].LatencyMS.Max = 6000
	r.Modes[2].Failed = 1
	r.Modes[2].PeakGateInflight = 7
	b.Reset()
	r.WriteTable(&b)
	for _, back := range []string{"latency max", "all-requests p99", "peak gate slots held"} {
		if !strings.Contains(b.String(), back) {
			t.Errorf("table lacks %q though it differs:\n%s", back, b.String())
		}
	}
}

func TestSpreadCell(t *testing.T) {
	row := tableRows[0] // sent
	runs := []ModeReport{{Sent: 10}, {Sent: 14}, {Sent: 11}}
	if got, want := spreadCell(row, runs), "11 [10 .. 14]"; got != want {
		t.Errorf("spreadCell = %q; want %q", got, want)
	}
	ms := tableRows[slices.IndexFunc(tableRows, func(r tableRow) bool { return r.name == "latency p50" })]
	if got, want := spreadCell(ms, []ModeReport{{LatencyMS: Percentiles{P50: 2}}, {LatencyMS: Percentiles{P50: 3}}, {LatencyMS: Percentiles{P50: 9}}}), "3 ms [2 .. 9]"; got != want {
		t.Errorf("spreadCell = %q; want %q", got, want)
	}
	if got, want := spreadCell(row, runs[:1]), "10"; got != want {
		t.Errorf("spreadCell of one run = %q; want %q", got, want)
	}
	if got, want := spreadCell(row, []ModeReport{{Sent: 5}, {Sent: 5}}), "5"; got != want {
		t.Errorf("spreadCell of agreeing runs = %q; want %q", got, want)
	}
}
