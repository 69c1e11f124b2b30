package bench

import (
	"fmt"
	"math"
	"slices"
	"sort"
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

// spreadOf is the median, min and max of a figure over runs.
func spreadOf(runs []ModeReport, get func(m *ModeReport) float64) (med, lo, hi float64) {
	vs := make([]float64, len(runs))
	for i := range runs {
		vs[i] = get(&runs[i])
	}
	return spread(vs)
}

// streams reports whether every run of mode had successful streams to
// time.
func (in *verdictInput) streams(mode string) bool {
	for _, r := range in.runs {
		if m := r.Mode(mode); m == nil || m.TTFTMS.N == 0 {
			return false
		}
	}
	return true
}

// count shows a median of counts: whole unless it fell between two.
func count(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

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

// ScenarioVerdict is a scenario's one verdict line in the suite: what it
// is about (Kind), the mode it judges (Subject) against the mode or modes
// it is compared with, the outcome, and the figures the line is made of,
// each over the runs (the median and range of its per-seed values).
type ScenarioVerdict struct {
	Kind    string          `json:"kind"`
	Subject string          `json:"subject"`
	Against []string        `json:"against"`
	Outcome string          `json:"outcome"` // wins, loses, ties or mixed
	Line    string          `json:"line"`
	Figures []VerdictFigure `json:"figures"`
}

// VerdictFigure is one figure of a verdict line: its text in the line,
// its per-seed values' median and range, and, when it decides the
// outcome, who it favours (wins, ties or loses, for the subject).
type VerdictFigure struct {
	Name    string  `json:"name"`
	Text    string  `json:"text"`
	Median  float64 `json:"median"`
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Decides bool    `json:"decides,omitempty"`
	Favours string  `json:"favours,omitempty"`
	outcome int
	aspect  string // what it bears on, for the table's line (aspectsVerdict)
}

// verdictKinds are what a scenario's verdict can be about ("verdict" in
// its JSON), each a function of the runs' figures.
var verdictKinds = map[string]func(in *verdictInput) ScenarioVerdict{
	"latency":   latencyVerdict,
	"overload":  overloadVerdict,
	"cache":     cacheVerdict,
	"ratelimit": ratelimitVerdict,
	"tenants":   tenantsVerdict,
	"capacity":  capacityVerdict,
	"bulk":      bulkVerdict,
}

// VerdictKinds lists the kinds a scenario's "verdict" may name.
func VerdictKinds() []string {
	var out []string
	for k := range verdictKinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// verdictInput is what a verdict reads: each run's figures and, for a
// scenario with a companion, the companion's runs and the tenant they
// compare.
type verdictInput struct {
	runs   []*Report
	alone  []*Report
	tenant string
}

// VerdictOf computes the verdict line of kind ("" is latency) from rep's
// figures, and alone's (the companion's, or nil) for the tenant. It reads
// only what report.json holds, so the line can be checked against it.
func VerdictOf(kind string, rep, alone *Report, tenant string) ScenarioVerdict {
	if kind == "" {
		kind = "latency"
	}
	f := verdictKinds[kind]
	if f == nil || rep == nil || len(rep.Modes) == 0 {
		return ScenarioVerdict{Kind: kind}
	}
	in := &verdictInput{runs: rep.runs(), tenant: tenant}
	if alone != nil {
		in.alone = alone.runs()
	}
	v := f(in)
	v.Kind = kind
	return v
}

// has reports whether every run has the mode.
func (in *verdictInput) has(mode string) bool {
	for _, r := range in.runs {
		if r.Mode(mode) == nil {
			return false
		}
	}
	return len(in.runs) > 0
}

// pick is the subject and the mode it is compared with: the first of
// subjects every run has, against the first of bases that is not it.
func (in *verdictInput) pick(subjects, bases []string) (subject, base string) {
	var modes []string
	for _, m := range in.runs[0].Modes {
		modes = append(modes, m.Mode)
	}
	subject = modes[len(modes)-1]
	for _, s := range subjects {
		if in.has(s) {
			subject = s
			break
		}
	}
	for _, b := range append(slices.Clone(bases), modes...) {
		if b != subject && in.has(b) {
			return subject, b
		}
	}
	return subject, ""
}

// vals is a figure of mode in every run (0 where a run lacks the mode).
func (in *verdictInput) vals(mode string, get func(m *ModeReport) float64) []float64 {
	out := make([]float64, len(in.runs))
	for i, r := range in.runs {
		if m := r.Mode(mode); m != nil {
			out[i] = get(m)
		}
	}
	return out
}

// judge says who a figure favours, the subject's values s against the
// base's b, seed by seed: s[i] and b[i] are the two modes' runs of one
// seed, against the same arrivals and the same upstream. A side wins when
// it is better on at least one seed, beyond the tolerance (or floor), and
// worse on none; seeds that disagree, or that all tie, tie. Comparing the
// two sides' ranges unpaired instead let the spread between seeds hide a
// difference every seed showed (spike: windowed's p50 was +47 to +335 ms
// on each of three seeds, yet the ranges overlapped), and let one seed
// with nothing at stake, both sides 0, tie a figure the other seeds all
// favoured (ratelimited's 429s: 0 vs 14 and 25, and 0 vs 0).
func judge(s, b []float64, floor float64, higherIsBetter bool) int {
	won, lost := false, false
	for i := range min(len(s), len(b)) {
		o := lowerBetter(s[i], b[i], floor)
		if higherIsBetter {
			o = higherBetter(s[i], b[i])
		}
		won, lost = won || o == wins, lost || o == loses
	}
	switch {
	case won && !lost:
		return wins
	case lost && !won:
		return loses
	}
	return ties
}

// shown is a per-seed figure as text: the median and, when the seeds
// differ, the range.
func shown(vs []float64, format func(float64) string) (text string, med, lo, hi float64) {
	med, lo, hi = spread(slices.Clone(vs))
	text = format(med)
	if lo != hi {
		text += " [" + format(lo) + " .. " + format(hi) + "]"
	}
	return text, med, lo, hi
}

// per is f of each run's pair of values.
func per(s, b []float64, f func(s, b float64) float64) []float64 {
	out := make([]float64, len(s))
	for i := range s {
		out[i] = f(s[i], b[i])
	}
	return out
}

func diff(s, b float64) float64 { return s - b }

func quotient(s, b float64) float64 {
	if b == 0 {
		if s == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return s / b
}

func times(v float64) string {
	if math.IsInf(v, 1) {
		return "∞×"
	}
	return fmt.Sprintf("%.2f×", v)
}

func pct(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) }
func usd(v float64) string { return fmt.Sprintf("$%.4f", v) }
func fixed2(v float64) string {
	if math.IsInf(v, 1) {
		return "∞" // calls, and no success
	}
	return fmt.Sprintf("%.2f", v)
}

// verdictBuilder collects a line's figures.
type verdictBuilder struct {
	v    ScenarioVerdict
	text []string
}

// add puts a figure in the line: its values' text, named, and, when
// outcome is not -1, a deciding figure.
func (b *verdictBuilder) add(name, label string, vs []float64, format func(float64) string, outcome int) {
	text, med, lo, hi := shown(vs, format)
	if label != "" {
		text = label + " " + text
	}
	f := VerdictFigure{Name: name, Text: text, Median: finite(med), Min: finite(lo), Max: finite(hi), outcome: outcome}
	if outcome >= 0 {
		f.Decides, f.Favours = true, [...]string{"wins", "ties", "loses"}[outcome]
	}
	b.v.Figures = append(b.v.Figures, f)
	b.text = append(b.text, text)
}

// pair puts "label S vs B" in the line, the two modes' per-seed values.
func (b *verdictBuilder) pair(name, label string, s, bv []float64, format func(float64) string, outcome int) {
	st, sm, slo, shi := shown(s, format)
	bt, _, _, _ := shown(bv, format)
	text := label + " " + st + " vs " + bt
	f := VerdictFigure{Name: name, Text: text, Median: finite(sm), Min: finite(slo), Max: finite(shi), outcome: outcome}
	if outcome >= 0 {
		f.Decides, f.Favours = true, [...]string{"wins", "ties", "loses"}[outcome]
	}
	b.v.Figures = append(b.v.Figures, f)
	b.text = append(b.text, text)
}

// figure puts a deciding figure in the line whose text the caller made,
// under an aspect: its per-seed values' median and range, and who they
// favour.
func (b *verdictBuilder) figure(aspect, name, text string, med, lo, hi float64, outcome int) {
	b.v.Figures = append(b.v.Figures, VerdictFigure{Name: name, Text: text, Median: finite(med), Min: finite(lo), Max: finite(hi),
		Decides: true, Favours: [...]string{"wins", "ties", "loses"}[outcome], outcome: outcome, aspect: aspect})
	b.text = append(b.text, text)
}

// note adds words to the line that are no figure.
func (b *verdictBuilder) note(s string) { b.text = append(b.text, s) }

// done is the line: "windowed wins vs plain: figures", the outcome from
// the deciding figures (all that do not tie favour one side: it wins or
// loses; some each way: mixed), and the seeds when there were several.
func (b *verdictBuilder) done(runs int) ScenarioVerdict {
	w, l := 0, 0
	for _, f := range b.v.Figures {
		if !f.Decides {
			continue
		}
		switch f.outcome {
		case wins:
			w++
		case loses:
			l++
		}
	}
	switch {
	case w > 0 && l > 0:
		b.v.Outcome = "mixed"
	case w > 0:
		b.v.Outcome = "wins"
	case l > 0:
		b.v.Outcome = "loses"
	default:
		b.v.Outcome = "ties"
	}
	line := b.v.Subject + " " + b.v.Outcome
	if len(b.v.Against) > 0 {
		line += " vs " + strings.Join(b.v.Against, ", ")
	}
	line += ": " + strings.Join(b.text, ", ")
	if runs > 1 {
		line += fmt.Sprintf(" (medians [ranges] of %d seeds)", runs)
	}
	b.v.Line = line
	return b.v
}

func newVerdict(subject string, against ...string) *verdictBuilder {
	return &verdictBuilder{v: ScenarioVerdict{Subject: subject, Against: against}}
}

// anyFailed reports whether a mode failed or lost a request in some run.
func (in *verdictInput) anyFailed(modes ...string) bool {
	for _, m := range modes {
		for _, v := range in.vals(m, func(m *ModeReport) float64 { return float64(m.Failed + m.Lost) }) {
			if v > 0 {
				return true
			}
		}
	}
	return false
}

// tail adds the p99 of every request, failures counted, when some
// failed (else the p99 of the successes, the same set): the tail a
// client sees.
func (in *verdictInput) tail(b *verdictBuilder, s, base string, decides bool) {
	get, label := func(m *ModeReport) float64 { return m.LatencyMS.P99 }, "p99"
	if in.anyFailed(s, base) {
		get, label = func(m *ModeReport) float64 { return m.LatencyAllMS.P99 }, "all-requests p99"
	}
	sv, bv := in.vals(s, get), in.vals(base, get)
	o := -1
	if decides {
		o = judge(sv, bv, VerdictFloorMS, false)
	}
	b.add("p99", label, per(sv, bv, diff), deltaMS, o)
}

// failures adds "failures S vs B" when either side failed a request.
func (in *verdictInput) failures(b *verdictBuilder, s, base string, decides bool) {
	if !in.anyFailed(s, base) {
		return
	}
	get := func(m *ModeReport) float64 { return float64(m.Failed + m.Lost) }
	sv, bv := in.vals(s, get), in.vals(base, get)
	o := -1
	if decides {
		o = judge(sv, bv, 0, false)
	}
	b.pair("failures", "failures", sv, bv, count, o)
}

// latencyVerdict, for load the upstream can carry: what the window costs
// or gains in latency (p50 and the tail), and whether there was anything
// to protect (plain's peak upstream in flight against the cap).
func latencyVerdict(in *verdictInput) ScenarioVerdict {
	s, base := in.pick([]string{ModeWindowed}, []string{ModePlain})
	b := newVerdict(s, base)
	p50 := func(m *ModeReport) float64 { return m.LatencyMS.P50 }
	sv, bv := in.vals(s, p50), in.vals(base, p50)
	b.add("p50", "p50", per(sv, bv, diff), deltaMS, judge(sv, bv, VerdictFloorMS, false))
	in.tail(b, s, base, true)
	in.failures(b, s, base, true)
	peak := func(m *ModeReport) float64 { return float64(m.PeakUpstreamInflight) }
	b.pair("peak_upstream", "peak upstream in flight", in.vals(s, peak), in.vals(base, peak), count, -1)
	capOf := in.vals(s, func(m *ModeReport) float64 { return float64(m.Cap) })
	if c, _, _ := spread(capOf); c > 0 {
		_, _, basePeak := spread(in.vals(base, peak))
		if basePeak <= c {
			b.note(fmt.Sprintf("nothing to protect at this load (%s's peak within the cap of %s)", base, count(c)))
		} else {
			b.note(fmt.Sprintf("cap %s", count(c)))
		}
	}
	return b.done(len(in.runs))
}

// overloadVerdict, for more than the upstream can serve: the share of
// the offered requests served, the upstream work per success (calls,
// retries and refusals included), the tail with failures counted, and
// the cost.
func overloadVerdict(in *verdictInput) ScenarioVerdict {
	s, base := in.pick([]string{ModeWindowed}, []string{ModePlain})
	b := newVerdict(s, base)
	ss, bs := in.vals(s, servedShare), in.vals(base, servedShare)
	b.pair("served", "served", ss, bs, pct, judge(ss, bs, 0, true))
	work := func(m *ModeReport) float64 { return quotient(float64(m.UpstreamCalls), float64(m.Succeeded)) }
	sw, bw := in.vals(s, work), in.vals(base, work)
	b.pair("calls_per_success", "upstream calls per success", sw, bw, fixed2, judge(sw, bw, 0, false))
	in.tail(b, s, base, true)
	cost := func(m *ModeReport) float64 { return m.CostUSD }
	b.pair("cost", "cost", in.vals(s, cost), in.vals(base, cost), usd, -1)
	return b.done(len(in.runs))
}

// cacheVerdict, for requests that share a prompt prefix: the input cost
// (what the prefix's cache writes and reads come to) against the base,
// the cache writes, and what waiting for the leader costs the followers
// in time to first token.
func cacheVerdict(in *verdictInput) ScenarioVerdict {
	s, base := in.pick([]string{ModeWindowed}, []string{ModePlain})
	b := newVerdict(s, base)
	cost := func(m *ModeReport) float64 { return m.InputCostUSD }
	sc, bc := in.vals(s, cost), in.vals(base, cost)
	b.add("input_cost", "input cost", per(sc, bc, quotient), times, judge(sc, bc, 0, false))
	writes := func(m *ModeReport) float64 { return float64(m.Tokens.CacheCreation) }
	b.pair("cache_write_tokens", "cache writes (tokens)", in.vals(s, writes), in.vals(base, writes), count, -1)
	ttft := func(m *ModeReport) float64 { return m.TTFTMS.P50 }
	st, bt := in.vals(s, ttft), in.vals(base, ttft)
	b.add("ttft_p50", "TTFT p50", per(st, bt, diff), deltaMS, judge(st, bt, VerdictFloorMS, false))
	ttft99 := func(m *ModeReport) float64 { return m.TTFTMS.P99 }
	st, bt = in.vals(s, ttft99), in.vals(base, ttft99)
	b.add("ttft_p99", "TTFT p99", per(st, bt, diff), deltaMS, -1)
	in.failures(b, s, base, true)
	return b.done(len(in.runs))
}

// bulkVerdict, for the same work through realtime and through the bulk
// endpoint: the bill (Message Batches at half price) decides; the latency
// is the price, shown beside it.
func bulkVerdict(in *verdictInput) ScenarioVerdict {
	s, base := in.pick([]string{ModeBulk}, []string{ModePlain})
	b := newVerdict(s, base)
	cost := func(m *ModeReport) float64 { return m.CostUSD }
	sc, bc := in.vals(s, cost), in.vals(base, cost)
	b.add("cost", "cost", per(sc, bc, quotient), times, judge(sc, bc, 0, false))
	lat := func(m *ModeReport) float64 { return m.LatencyMS.P50 }
	sl, bl := in.vals(s, lat), in.vals(base, lat)
	b.add("latency_p50", "latency p50", per(sl, bl, diff), deltaMS, -1)
	in.failures(b, s, base, true)
	return b.done(len(in.runs))
}

// ratelimitVerdict, for an organisation offered more than its rate
// limits: the upstream's 429s, the upstream work per success, goodput,
// the tail with failures counted, and each other windowed mode's goodput
// and tail beside.
func ratelimitVerdict(in *verdictInput) ScenarioVerdict {
	s, base := in.pick([]string{ModeWindowed}, []string{ModePlain})
	b := newVerdict(s, base)
	r429 := func(m *ModeReport) float64 { return float64(m.Upstream429) }
	s4, b4 := in.vals(s, r429), in.vals(base, r429)
	b.pair("upstream_429", "upstream 429s", s4, b4, count, judge(s4, b4, 0, false))
	work := func(m *ModeReport) float64 { return quotient(float64(m.UpstreamCalls), float64(m.Succeeded)) }
	b.pair("calls_per_success", "upstream calls per success", in.vals(s, work), in.vals(base, work), fixed2, -1)
	good := func(m *ModeReport) float64 { return m.GoodputRPS }
	sg, bg := in.vals(s, good), in.vals(base, good)
	b.add("goodput", "goodput", per(sg, bg, quotient), times, judge(sg, bg, 0, true))
	in.failures(b, s, base, true)
	in.tail(b, s, base, true)
	for _, m := range in.runs[0].Modes {
		if m.Mode == s || m.Mode == base || !m.Windowed || !in.has(m.Mode) {
			continue
		}
		og := in.vals(m.Mode, good)
		text, _, _, _ := shown(per(og, bg, quotient), times)
		all := func(m *ModeReport) float64 { return m.LatencyAllMS.P99 }
		p99, _, _, _ := shown(in.vals(m.Mode, all), func(v float64) string { return deltaMS(v)[1:] })
		b.note(fmt.Sprintf("%s: goodput %s, all-requests p99 %s", m.Mode, text, p99))
	}
	return b.done(len(in.runs))
}

// tenantsVerdict, for several tenants at once: the named tenant's p99 in
// each mode as a multiple of its p99 alone (the companion run, same mode),
// the subject's against every other mode's. Without the companion it
// compares the tenant's p99 across the modes.
func tenantsVerdict(in *verdictInput) ScenarioVerdict {
	s, _ := in.pick([]string{ModeWindowed}, nil)
	var others []string
	for _, m := range in.runs[0].Modes {
		if m.Mode != s && in.has(m.Mode) {
			others = append(others, m.Mode)
		}
	}
	b := newVerdict(s, others...)
	p99 := func(r *Report, mode string) (float64, bool) {
		m := r.Mode(mode)
		if m == nil {
			return 0, false
		}
		for _, t := range m.Tenants {
			if t.Tenant == in.tenant {
				return t.LatencyMS.P99, t.LatencyMS.N > 0
			}
		}
		return 0, false
	}
	// byMode is the tenant's p99 in mode over the runs, over its p99
	// alone when the companion ran (its same mode, else its first).
	byMode := func(mode string) []float64 {
		out := make([]float64, len(in.runs))
		for i, r := range in.runs {
			v, _ := p99(r, mode)
			if i < len(in.alone) {
				a, ok := p99(in.alone[i], mode)
				if !ok && len(in.alone[i].Modes) > 0 {
					a, _ = p99(in.alone[i], in.alone[i].Modes[0].Mode)
				}
				v = quotient(v, a)
			}
			out[i] = v
		}
		return out
	}
	format, unit := times, " alone"
	if len(in.alone) == 0 {
		format, unit = func(v float64) string { return fmt.Sprintf("%.0f ms", v) }, ""
	}
	sv := byMode(s)
	b.add("tenant_p99", fmt.Sprintf("%s's p99", in.tenant), sv, func(v float64) string { return format(v) + unit }, -1)
	for _, o := range others {
		ov := byMode(o)
		floor := 0.0
		if len(in.alone) == 0 {
			floor = VerdictFloorMS
		}
		text, med, lo, hi := shown(ov, format)
		f := VerdictFigure{Name: "tenant_p99_" + o, Text: o + " " + text, Median: finite(med), Min: finite(lo), Max: finite(hi), Decides: true, outcome: judge(sv, ov, floor, false)}
		f.Favours = [...]string{"wins", "ties", "loses"}[f.outcome]
		b.v.Figures = append(b.v.Figures, f)
		b.text = append(b.text, f.Text)
	}
	return b.done(len(in.runs))
}

// capacityVerdict, for an upstream whose capacity changes: the subject
// (an adaptive limit) against each other mode (static caps) on goodput
// and failures, then the tails.
func capacityVerdict(in *verdictInput) ScenarioVerdict {
	s, _ := in.pick([]string{"adaptive", ModeWindowed}, nil)
	var others []string
	for _, m := range in.runs[0].Modes {
		if m.Mode != s && in.has(m.Mode) {
			others = append(others, m.Mode)
		}
	}
	b := newVerdict(s, others...)
	good := func(m *ModeReport) float64 { return m.GoodputRPS }
	fail := func(m *ModeReport) float64 { return float64(m.Failed + m.Lost) }
	all := func(m *ModeReport) float64 { return m.LatencyAllMS.P99 }
	for _, o := range others {
		sg, og := in.vals(s, good), in.vals(o, good)
		b.add("goodput_vs_"+o, "goodput vs "+o, per(sg, og, quotient), times, judge(sg, og, 0, true))
		sf, of := in.vals(s, fail), in.vals(o, fail)
		b.pair("failures_vs_"+o, "failures", sf, of, count, judge(sf, of, 0, false))
	}
	b.add("all_p99", "all-requests p99", in.vals(s, all), func(v float64) string { return fmt.Sprintf("%.0f ms", v) }, -1)
	for _, o := range others {
		text, _, _, _ := shown(in.vals(o, all), func(v float64) string { return fmt.Sprintf("%.0f ms", v) })
		b.note(o + " " + text)
	}
	return b.done(len(in.runs))
}
