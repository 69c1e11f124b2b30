package bench

import (
	"fmt"
	"math"
	"strconv"
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
// against plain and by how much, or "" unless both ran. After repeated
// runs it compares the medians, and a figure whose ranges overlap between
// the two paths is a tie too: the difference is within the noise.
//
// With mode bulk and plain, a second line compares bulk with plain the
// same way: bulk should win on cost (0.50x) and lose on latency, the
// price of waiting for a batch.
func (r *Report) Verdict() string {
	ps := r.runsOf(ModePlain)
	if len(ps) == 0 {
		return ""
	}
	var lines []string
	if ws := r.runsOf(ModeWindowed); len(ws) > 0 {
		lines = append(lines, verdict(ps, ws))
	}
	if bs := r.runsOf(ModeBulk); len(bs) > 0 {
		lines = append(lines, verdictOf(ps, bs, ModeBulk))
	}
	return strings.Join(lines, "\n")
}

func verdict(ps, ws []ModeReport) string { return verdictOf(ps, ws, ModeWindowed) }

// verdictOf compares mode's runs ws with plain's ps.
func verdictOf(ps, ws []ModeReport, mode string) string {
	var figs []verdictFigure
	// compare gives the medians of a figure and whether windowed's is
	// better; overlapping ranges tie (with one run each, only equal values
	// overlap, which the tolerance already ties).
	compare := func(get func(m *ModeReport) float64, floor float64, higherIsBetter bool) (w, p float64, outcome int) {
		w, wlo, whi := spreadOf(ws, get)
		p, plo, phi := spreadOf(ps, get)
		if wlo <= phi && plo <= whi {
			return w, p, ties
		}
		if higherIsBetter {
			return w, p, higherBetter(w, p)
		}
		return w, p, lowerBetter(w, p, floor)
	}
	add := func(aspect, text string, outcome int) {
		figs = append(figs, verdictFigure{aspect, text, outcome})
	}

	wp, pp, o := compare(func(m *ModeReport) float64 { return float64(m.PeakUpstreamInflight) }, 0, false)
	peak := fmt.Sprintf("peak upstream %s vs %s", count(wp), count(pp))
	if c := ws[0].Cap; c > 0 {
		// The gate is what the cap bounds; the simulator's exact counter
		// may briefly see one more (a reply read before its handler ends).
		held := true
		for _, w := range ws {
			held = held && w.PeakGateInflight <= c
		}
		if held {
			peak += fmt.Sprintf(", cap %d held", c)
		} else {
			peak += fmt.Sprintf(", cap %d exceeded", c)
		}
	}
	add("upstream protection", peak, o)

	w, p, o := compare(func(m *ModeReport) float64 { return m.GoodputRPS }, 0, true)
	add("throughput", "goodput "+ratio(w, p), o)
	w, p, o = compare(func(m *ModeReport) float64 { return float64(m.Failed + m.Lost) }, 0, false)
	add("reliability", fmt.Sprintf("failures %s vs %s", count(w), count(p)), o)
	ms := func(aspect, name string, get func(m *ModeReport) float64) {
		w, p, o := compare(get, VerdictFloorMS, false)
		add(aspect, name+" "+deltaMS(w-p), o)
	}
	ms("latency", "p50", func(m *ModeReport) float64 { return m.LatencyMS.P50 })
	ms("latency", "p99", func(m *ModeReport) float64 { return m.LatencyMS.P99 })
	if streams(ps) && streams(ws) {
		ms("TTFT", "p50", func(m *ModeReport) float64 { return m.TTFTMS.P50 })
		ms("TTFT", "p99", func(m *ModeReport) float64 { return m.TTFTMS.P99 })
	}
	w, p, o = compare(func(m *ModeReport) float64 { return m.CostUSD }, 0, false)
	add("cost", ratio(w, p), o)

	var parts []string
	for _, o := range []struct {
		outcome int
		word    string
	}{{wins, "wins on"}, {loses, "loses on"}, {ties, "ties on"}} {
		if s := groupFigures(figs, o.outcome); s != "" {
			parts = append(parts, o.word+" "+s)
		}
	}
	of := ""
	if len(ps) > 1 || len(ws) > 1 {
		of = fmt.Sprintf(", or ranges that overlap; medians of %d runs", min(len(ps), len(ws)))
	}
	return fmt.Sprintf("verdict, %s vs plain (a tie is within %.0f%% or %.0f ms%s): %s",
		mode, VerdictTolerance*100, VerdictFloorMS, of, strings.Join(parts, "; "))
}

// spreadOf is the median, min and max of a figure over runs.
func spreadOf(runs []ModeReport, get func(m *ModeReport) float64) (med, lo, hi float64) {
	vs := make([]float64, len(runs))
	for i := range runs {
		vs[i] = get(&runs[i])
	}
	return spread(vs)
}

// streams reports whether every run had successful streams to time.
func streams(runs []ModeReport) bool {
	for _, m := range runs {
		if m.TTFTMS.N == 0 {
			return false
		}
	}
	return true
}

// count shows a median of counts: whole unless it fell between two.
func count(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

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
	if math.Abs(d) < 0.5 {
		return "±0 ms" // not "-0 ms" for a difference that rounds away
	}
	if d < 0 {
		sign, d = "-", -d
	}
	if d >= 1000 {
		return fmt.Sprintf("%s%.1f s", sign, d/1000)
	}
	return fmt.Sprintf("%s%.0f ms", sign, d)
}
