package bench

import (
	"testing"
)

// fig builds a mode's figures for the verdict tests.
func fig(mode string, goodput, p50, p99, ttft50, ttft99 float64, peak, failed int, cost float64) ModeReport {
	m := ModeReport{Mode: mode, GoodputRPS: goodput, PeakUpstreamInflight: peak, PeakGateInflight: peak,
		Failed: failed, CostUSD: cost,
		LatencyMS: Percentiles{N: 64, P50: p50, P99: p99}, TTFTMS: Percentiles{N: 32, P50: ttft50, P99: ttft99}}
	if mode == ModeWindowed {
		m.Cap = 8
	}
	return m
}

func TestDeltaMS(t *testing.T) {
	for d, want := range map[float64]string{-0.4: "±0 ms", 0.2: "±0 ms", 13: "+13 ms", -999: "-999 ms", 2712: "+2.7 s", -5000: "-5.0 s"} {
		if got := deltaMS(d); got != want {
			t.Errorf("deltaMS(%g) = %q; want %q", d, got, want)
		}
	}
}
