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
	"budget":    budgetVerdict,
	"keypool":   keyPoolVerdict,
	"failover":  failoverVerdict,
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
