package bench

import (
	"math"
	"strings"
	"testing"

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
	r := &Report{Scenario: "spike", Seed: 4, Arrivals: 103, Version: "v1.2.3 abcdef123456",
		Sluice: SluiceSummary{MaxSize: 16, MaxWaitMS: 20, MaxConcurrency: 8, TimeoutS: 60},
		Client: ClientSummary{TimeoutS: 60, MaxRetries: 2},
		Spikes: []SpikeSummary{{FromS: 5, ToS: 10, Factor: 10}}}
	got := strings.Join(r.caption(), "\n")
	for _, want := range []string{"scenario spike, seed 4, 103 arrivals", "8 slots", "client timeout 60 s, 2 retries",
		"upstream latency x10 from 5 s to 10 s (shaded)", "sluice v1.2.3 abcdef123456"} {
		if !strings.Contains(got, want) {
			t.Errorf("caption\n%s\nlacks %q", got, want)
		}
	}
}
