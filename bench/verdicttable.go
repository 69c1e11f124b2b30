package bench

import (
	"fmt"
	"slices"
	"strings"
)

// Verdict is the table's closing line: where the windowed path wins, ties
// or loses against plain and by how much, every figure the two share
// grouped by what it bears on, or "" unless both ran. After repeated runs
// it shows the medians and judges each figure seed by seed: a side wins a
// figure that is better on some seed and worse on none (judge).
//
// With mode bulk and plain, a second line compares bulk with plain the
// same way: bulk should win on cost (0.50x) and lose on latency, the
// price of waiting for a batch.
//
// It is computed by the scenario verdicts' engine (verdictInput, judge,
// verdictBuilder), as aspectsVerdict: the same figure of the same report
// favours the same side in this line as in a scenario's (VerdictOf).
func (r *Report) Verdict() string {
	in := &verdictInput{runs: r.runs()}
	if !in.has(ModePlain) {
		return ""
	}
	var lines []string
	for _, mode := range []string{ModeWindowed, ModeBulk} {
		if in.has(mode) {
			lines = append(lines, in.aspectsVerdict(mode, ModePlain).Line)
		}
	}
	return strings.Join(lines, "\n")
}

// verdict is the windowed-against-plain line of runs whose figures are
// ps[i] (plain) and ws[i] (windowed).
func verdict(ps, ws []ModeReport) string {
	runs := make([]*Report, min(len(ps), len(ws)))
	for i := range runs {
		runs[i] = &Report{Modes: []ModeReport{ps[i], ws[i]}}
	}
	return (&verdictInput{runs: runs}).aspectsVerdict(ModeWindowed, ModePlain).Line
}

// aspectsVerdict compares mode s's runs with base's on every figure they
// share, each under the aspect it bears on (upstream protection,
// throughput, reliability, latency, TTFT, cost), shown as medians.
func (in *verdictInput) aspectsVerdict(s, base string) ScenarioVerdict {
	b := newVerdict(s, base)
	// fig adds a deciding figure: the text of the two sides' medians, and
	// who the per-seed values favour.
	fig := func(aspect, name string, get func(m *ModeReport) float64, floor float64, higherIsBetter bool, text func(sm, bm float64) string) {
		sv, bv := in.vals(s, get), in.vals(base, get)
		sm, slo, shi := spread(slices.Clone(sv))
		bm, _, _ := spread(slices.Clone(bv))
		b.figure(aspect, name, text(sm, bm), sm, slo, shi, judge(sv, bv, floor, higherIsBetter))
	}
	countText := func(label string) func(sm, bm float64) string {
		return func(sm, bm float64) string { return fmt.Sprintf("%s %s vs %s", label, count(sm), count(bm)) }
	}
	delta := func(label string) func(sm, bm float64) string {
		return func(sm, bm float64) string { return label + " " + deltaMS(sm-bm) }
	}

	peak := countText("peak upstream")
	capOf := in.vals(s, func(m *ModeReport) float64 { return float64(m.Cap) })
	if c := capOf[0]; c > 0 {
		// The gate is what the cap bounds; the simulator's exact counter
		// may briefly see one more (a reply read before its handler ends).
		word := "held"
		for _, g := range in.vals(s, func(m *ModeReport) float64 { return float64(m.PeakGateInflight) }) {
			if g > c {
				word = "exceeded"
			}
		}
		peak = func(sm, bm float64) string {
			return fmt.Sprintf("peak upstream %s vs %s, cap %s %s", count(sm), count(bm), count(c), word)
		}
	}
	fig("upstream protection", "peak_upstream", func(m *ModeReport) float64 { return float64(m.PeakUpstreamInflight) }, 0, false, peak)
	fig("throughput", "goodput", func(m *ModeReport) float64 { return m.GoodputRPS }, 0, true,
		func(sm, bm float64) string { return "goodput " + ratio(sm, bm) })
	fig("reliability", "failures", func(m *ModeReport) float64 { return float64(m.Failed + m.Lost) }, 0, false, countText("failures"))
	fig("latency", "p50", func(m *ModeReport) float64 { return m.LatencyMS.P50 }, VerdictFloorMS, false, delta("p50"))
	fig("latency", "success_p99", func(m *ModeReport) float64 { return m.LatencyMS.P99 }, VerdictFloorMS, false, delta("p99"))
	if in.streams(s) && in.streams(base) {
		fig("TTFT", "ttft_p50", func(m *ModeReport) float64 { return m.TTFTMS.P50 }, VerdictFloorMS, false, delta("p50"))
		fig("TTFT", "ttft_p99", func(m *ModeReport) float64 { return m.TTFTMS.P99 }, VerdictFloorMS, false, delta("p99"))
	}
	fig("cost", "cost", func(m *ModeReport) float64 { return m.CostUSD }, 0, false, ratio)

	v := b.done(len(in.runs))
	var parts []string
	for _, o := range []struct {
		outcome int
		word    string
	}{{wins, "wins on"}, {loses, "loses on"}, {ties, "ties on"}} {
		if s := groupFigures(v.Figures, o.outcome); s != "" {
			parts = append(parts, o.word+" "+s)
		}
	}
	of := ""
	if len(in.runs) > 1 {
		of = fmt.Sprintf(", or seeds that disagree; medians of %d runs", len(in.runs))
	}
	v.Line = fmt.Sprintf("verdict, %s vs %s (a tie is within %.0f%% or %.0f ms%s): %s",
		s, base, VerdictTolerance*100, VerdictFloorMS, of, strings.Join(parts, "; "))
	return v
}

// groupFigures lists the figures with the outcome by aspect, in the order
// the aspects first appear: "latency (p50 +471 ms, p99 +2.8 s), cost (1.00x)".
func groupFigures(figs []VerdictFigure, outcome int) string {
	var order []string
	by := map[string][]string{}
	for _, f := range figs {
		if f.outcome != outcome {
			continue
		}
		if _, ok := by[f.aspect]; !ok {
			order = append(order, f.aspect)
		}
		by[f.aspect] = append(by[f.aspect], f.Text)
	}
	out := make([]string, len(order))
	for i, a := range order {
		out[i] = a + " (" + strings.Join(by[a], ", ") + ")"
	}
	return strings.Join(out, ", ")
}
