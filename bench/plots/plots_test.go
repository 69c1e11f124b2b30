package plots

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/bench"
	"gonum.org/v1/plot"
)

func labels(ticks []plot.Tick) []string {
	var out []string
	for _, t := range ticks {
		if !t.IsMinor() {
			out = append(out, t.Label)
		}
	}
	return out
}

// The latency CDF's log axis gets several labels whatever the spread: the
// old one showed a single "1000" for a burst's 250..5400 ms.
func TestLogTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{250, 5400, "500 1000 2000 5000"},
		{3, 40000, "5 10 20 50 100 200 500 1000 2000 5000 10000 20000"},
		// Less than a factor of 5: linear steps, still on the log scale.
		{2300, 2600, "2300 2350 2400 2450 2500 2550 2600"},
	} {
		if got := strings.Join(labels(logTicks{}.Ticks(tc.lo, tc.hi)), " "); got != tc.want {
			t.Errorf("logTicks(%g, %g) labels %q; want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}

func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi  float64
		integer bool
		want    string
	}{
		{0, 5.3, false, "0 1 2 3 4 5"},
		{0, 1, false, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{0, 67, true, "0 10 20 30 40 50 60"},
		// Counts never get a fractional label, however small the range.
		{0, 3, true, "0 1 2 3"},
	} {
		ticks := niceTicks{integer: tc.integer}.Ticks(tc.lo, tc.hi)
		if got := strings.Join(labels(ticks), " "); got != tc.want {
			t.Errorf("niceTicks(%g, %g, integer %v) labels %q; want %q", tc.lo, tc.hi, tc.integer, got, tc.want)
		}
		if tc.integer {
			for _, tk := range ticks {
				if tk.Value != math.Trunc(tk.Value) {
					t.Errorf("count axis has a tick at %g", tk.Value)
				}
			}
		}
	}
}

func TestCaption(t *testing.T) {
	r := &bench.Report{Scenario: "spike", Seed: 4, Arrivals: 103, Version: "v1.2.3 abcdef123456",
		Sluice: bench.SluiceSummary{MaxSize: 16, MaxWaitMS: 20, MaxConcurrency: 8, TimeoutS: 60},
		Client: bench.ClientSummary{TimeoutS: 60, MaxRetries: 2},
		Spikes: []bench.SpikeSummary{{FromS: 5, ToS: 10, Factor: 10}}}
	got := strings.Join(caption(r), "\n")
	for _, want := range []string{"scenario spike, seed 4, 103 arrivals", "8 slots", "client timeout 60 s, 2 retries",
		"upstream latency x10 from 5 s to 10 s (shaded)", "sluice v1.2.3 abcdef123456"} {
		if !strings.Contains(got, want) {
			t.Errorf("caption\n%s\nlacks %q", got, want)
		}
	}
}

// Write draws every chart OutputFiles names, as Report.WriteFiles' Plot.
func TestWriteDrawsTheCharts(t *testing.T) {
	sc, err := bench.ParseScenario([]byte(`{"name":"plots","seed":7,
		"sim":{"ttft":"20ms","per_token":"1ms","capacity":4,"spikes":[{"from":"0s","to":"50ms","factor":2}]},
		"sluice":{"max_concurrency":2,"max_wait":"5ms","max_size":4},
		"client":{"timeout":"10s"},
		"workload":{"kind":"burst","n":12,"stream_fraction":0.5,"prompt_tokens":[10,50],"output_tokens":[4,12]}}`), "test.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.Run(context.Background(), bench.Options{Scenario: sc, Modes: []string{bench.ModeDirect, bench.ModePlain, bench.ModeWindowed}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir, Write); err != nil {
		t.Fatal(err)
	}
	for _, name := range bench.OutputFiles() {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", name, err)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "inflight.svg"))
	if err != nil || !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "Upstream in-flight") {
		t.Errorf("inflight.svg is not the in-flight chart: %v %.200s", err, svg)
	}
}

// The suite's page holds each scenario's three charts inline, as one
// self-contained page.
func TestWriteSuitePageInlinesThePlots(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scenario for seconds")
	}
	s, err := bench.RunSuite(context.Background(), bench.SuiteOptions{Short: true, Scenarios: []string{"burst"}, Command: "go test"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := s.WriteFiles(dir, Write); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Entries); n == 0 || strings.Contains(string(page), "<?xml") || strings.Count(string(page), "<svg") != 3*n ||
		strings.Contains(string(page), "<link") || strings.Contains(string(page), "src=") {
		t.Errorf("index.html is not one self-contained page with %d inline plots", 3*n)
	}
}
