package bench

import (
	"fmt"
	"math"
	"strings"
)

// A figure within VerdictTolerance of plain's, relatively, is a tie: runs
// of the same seed on a shared machine differ by a few percent, so a
// smaller difference says nothing. Latencies also tie within
// VerdictFloorMS, the scheduling noise a loaded 2-core machine adds to any
// one request, whatever its ratio to a small plain figure.
const (
	VerdictTolerance = 0.05
	VerdictFloorMS   = 20.0
)

// The outcomes of one figure, windowed against plain.
const (
	wins = iota
	ties
	loses
)

// A verdictFigure is one comparison: the aspect it bears on, what the
// reader sees ("p99 +2.8 s"), and who it favours.
type verdictFigure struct {
	aspect  string
	text    string
	outcome int
}

// Verdict is one line saying where the windowed path wins, ties or loses
// against plain in this run and by how much, or "" unless both ran.
func (r *Report) Verdict() string {
	p, w := r.Mode(ModePlain), r.Mode(ModeWindowed)
	if p == nil || w == nil {
		return ""
	}
	return verdict(p, w)
}

func verdict(p, w *ModeReport) string {
	var figs []verdictFigure
	add := func(aspect, text string, outcome int) {
		figs = append(figs, verdictFigure{aspect, text, outcome})
	}

	peak := fmt.Sprintf("peak upstream %d vs %d", w.PeakUpstreamInflight, p.PeakUpstreamInflight)
	if w.Cap > 0 {
		// The gate is what the cap bounds; the simulator's exact counter
		// may briefly see one more (a reply read before its handler ends).
		if w.PeakGateInflight <= w.Cap {
			peak += fmt.Sprintf(", cap %d held", w.Cap)
		} else {
			peak += fmt.Sprintf(", cap %d exceeded", w.Cap)
		}
	}
	add("upstream protection", peak, lowerBetter(float64(w.PeakUpstreamInflight), float64(p.PeakUpstreamInflight), 0))

	add("throughput", "goodput "+ratio(w.GoodputRPS, p.GoodputRPS), higherBetter(w.GoodputRPS, p.GoodputRPS))
	werr, perr := w.Failed+w.Lost, p.Failed+p.Lost
	add("reliability", fmt.Sprintf("failures %d vs %d", werr, perr), lowerBetter(float64(werr), float64(perr), 0))
	add("latency", "p50 "+deltaMS(w.LatencyMS.P50-p.LatencyMS.P50), lowerBetter(w.LatencyMS.P50, p.LatencyMS.P50, VerdictFloorMS))
	add("latency", "p99 "+deltaMS(w.LatencyMS.P99-p.LatencyMS.P99), lowerBetter(w.LatencyMS.P99, p.LatencyMS.P99, VerdictFloorMS))
	if w.TTFTMS.N > 0 && p.TTFTMS.N > 0 {
		add("TTFT", "p50 "+deltaMS(w.TTFTMS.P50-p.TTFTMS.P50), lowerBetter(w.TTFTMS.P50, p.TTFTMS.P50, VerdictFloorMS))
		add("TTFT", "p99 "+deltaMS(w.TTFTMS.P99-p.TTFTMS.P99), lowerBetter(w.TTFTMS.P99, p.TTFTMS.P99, VerdictFloorMS))
	}
	add("cost", ratio(w.CostUSD, p.CostUSD), lowerBetter(w.CostUSD, p.CostUSD, 0))

	var parts []string
	for _, o := range []struct {
		outcome int
		word    string
	}{{wins, "wins on"}, {loses, "loses on"}, {ties, "ties on"}} {
		if s := groupFigures(figs, o.outcome); s != "" {
			parts = append(parts, o.word+" "+s)
		}
	}
	return fmt.Sprintf("verdict, windowed vs plain (a tie is within %.0f%% or %.0f ms): %s",
		VerdictTolerance*100, VerdictFloorMS, strings.Join(parts, "; "))
}

// groupFigures lists the figures with the outcome by aspect, in the order
// the aspects first appear: "latency (p50 +471 ms, p99 +2.8 s), cost (1.00x)".
func groupFigures(figs []verdictFigure, outcome int) string {
	var order []string
	by := map[string][]string{}
	for _, f := range figs {
		if f.outcome != outcome {
			continue
		}
		if _, ok := by[f.aspect]; !ok {
			order = append(order, f.aspect)
		}
		by[f.aspect] = append(by[f.aspect], f.text)
	}
	out := make([]string, len(order))
	for i, a := range order {
		out[i] = a + " (" + strings.Join(by[a], ", ") + ")"
	}
	return strings.Join(out, ", ")
}

// lowerBetter compares windowed's w to plain's p where less is better; a
// difference within the relative tolerance or the absolute floor ties.
func lowerBetter(w, p, floor float64) int {
	d := w - p
	if math.Abs(d) <= max(VerdictTolerance*math.Abs(p), floor) {
		return ties
	}
	if d < 0 {
		return wins
	}
	return loses
}

func higherBetter(w, p float64) int {
	switch lowerBetter(w, p, 0) {
	case wins:
		return loses
	case loses:
		return wins
	}
	return ties
}

// ratio is w/p as "0.48x", or the two values when p is zero.
func ratio(w, p float64) string {
	if p == 0 {
		return fmt.Sprintf("%g vs 0", w)
	}
	return fmt.Sprintf("%.2fx", w/p)
}

// deltaMS is a signed difference, in ms below a second and in s above.
func deltaMS(d float64) string {
	sign := "+"
	if d < 0 {
		sign, d = "-", -d
	}
	if d >= 1000 {
		return fmt.Sprintf("%s%.1f s", sign, d/1000)
	}
	return fmt.Sprintf("%s%.0f ms", sign, d)
}
