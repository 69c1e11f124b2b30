package bench

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The verdicts of routing over several upstream keys and backends
// (docs/routing.md): keypool, sluice's router against one key and
// against taking the keys in turn; failover, a second backend against
// none while the first is down.

// keyPoolVerdict, for load past one key's rate limit on several keys
// with shared prompt prefixes: for each mode, the share of the offered
// requests served, the upstream's 429s, the goodput in input tokens a
// minute (every input token of the answers, cache reads included, and
// apart the part the keys' limits count: uncached input and cache
// writes) and the share of input tokens read from the cache. The
// subject (routed) is judged against each other mode on all four.
func keyPoolVerdict(in *verdictInput) ScenarioVerdict {
	s, _ := in.pick([]string{"routed"}, nil)
	var others []string
	for _, m := range in.runs[0].Modes {
		if m.Mode != s && in.has(m.Mode) {
			others = append(others, m.Mode)
		}
	}
	b := newVerdict(s, others...)
	type figure struct {
		name, label    string
		get            func(m *ModeReport) float64
		format         func(float64) string
		higher         bool
		text           func(label, v string) string
		countedByLimit bool
	}
	figs := []figure{
		{name: "served", label: "served", get: servedShare, format: pct, higher: true},
		{name: "upstream_429", label: "upstream 429s", get: func(m *ModeReport) float64 { return float64(m.Upstream429) }, format: count},
		{name: "goodput_itpm", label: "goodput", get: inputPerMinute, format: kilo, higher: true,
			text: func(label, v string) string { return label + " " + v + " input tokens/min" }},
		{name: "limit_itpm", get: countedPerMinute, format: kilo, countedByLimit: true},
		{name: "cache_read_share", label: "cache reads", get: cacheReadShare, format: pct, higher: true},
	}
	var blocks []string
	for _, mode := range append([]string{s}, others...) {
		var parts []string
		for _, f := range figs {
			vs := in.vals(mode, f.get)
			text, med, lo, hi := shown(vs, f.format)
			if f.countedByLimit { // beside the goodput, in brackets: no figure of its own
				parts[len(parts)-1] += " (" + text + " counted by the limits)"
				continue
			}
			if f.text != nil {
				text = f.text(f.label, text)
			} else {
				text = f.label + " " + text
			}
			fig := VerdictFigure{Name: f.name, Text: text, Median: finite(med), Min: finite(lo), Max: finite(hi), outcome: -1}
			if mode != s {
				fig.Name += "_" + mode
				fig.outcome = judge(in.vals(s, f.get), vs, 0, f.higher)
				fig.Decides, fig.Favours = true, [...]string{"wins", "ties", "loses"}[fig.outcome]
			}
			b.v.Figures = append(b.v.Figures, fig)
			parts = append(parts, text)
		}
		if k := in.byKey(mode); k != "" {
			parts = append(parts, k)
		}
		blocks = append(blocks, mode+": "+strings.Join(parts, ", "))
	}
	b.note(strings.Join(blocks, "; "))
	return b.done(len(in.runs))
}

// failoverVerdict, for a backend that is down for a stretch: the subject
// (a second backend to fail over to) against the base (none) on the
// share of the offered requests served and on the all-requests p99, with
// the upstream's 529s beside.
func failoverVerdict(in *verdictInput) ScenarioVerdict {
	s, base := in.pick([]string{"two-backends"}, []string{"one-backend"})
	b := newVerdict(s, base)
	ss, bs := in.vals(s, servedShare), in.vals(base, servedShare)
	b.pair("served", "served", ss, bs, pct, judge(ss, bs, 0, true))
	all := func(m *ModeReport) float64 { return m.LatencyAllMS.P99 }
	sp, bp := in.vals(s, all), in.vals(base, all)
	b.pair("all_p99", "all-requests p99", sp, bp, seconds, judge(sp, bp, VerdictFloorMS, false))
	r529 := func(m *ModeReport) float64 { return float64(m.Upstream529) }
	b.pair("upstream_529", "upstream 529s", in.vals(s, r529), in.vals(base, r529), count, -1)
	if k := in.byKey(s); k != "" {
		b.note(strings.Replace(k, "calls by key", "calls by key ("+s+")", 1))
	}
	return b.done(len(in.runs))
}

// byKey is "calls by key a/1 N, b/1 M" for mode, run through two keys
// or more (ModeReport.UpstreamByKey); "" otherwise.
func (in *verdictInput) byKey(mode string) string {
	m := in.runs[0].Mode(mode)
	if m == nil || len(m.UpstreamByKey) < 2 {
		return ""
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(m.UpstreamByKey)) {
		text, _, _, _ := shown(in.vals(mode, func(m *ModeReport) float64 { return float64(m.UpstreamByKey[name]) }), count)
		parts = append(parts, name+" "+text)
	}
	return "calls by key " + strings.Join(parts, ", ")
}

// inputPerMinute is the input tokens of the upstream's answers (uncached,
// cache writes and cache reads) a minute over the mode's span.
func inputPerMinute(m *ModeReport) float64 {
	t := m.Tokens
	return perMinute(float64(t.Input+t.CacheCreation+t.CacheRead), m.SpanS)
}

// countedPerMinute is the part of inputPerMinute an input-token rate
// limit counts: uncached input and cache writes, not cache reads.
func countedPerMinute(m *ModeReport) float64 {
	return perMinute(float64(m.Tokens.Input+m.Tokens.CacheCreation), m.SpanS)
}

func perMinute(n, spanS float64) float64 {
	if spanS <= 0 {
		return 0
	}
	return n / spanS * 60
}

// cacheReadShare is the share of the answers' input tokens read from the
// prompt cache.
func cacheReadShare(m *ModeReport) float64 {
	t := m.Tokens
	if all := t.Input + t.CacheCreation + t.CacheRead; all > 0 {
		return float64(t.CacheRead) / float64(all)
	}
	return 0
}

// kilo shows a count in thousands.
func kilo(v float64) string { return fmt.Sprintf("%.0fk", v/1000) }

// seconds shows a time in ms, as seconds from one.
func seconds(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.1f s", v/1000)
	}
	return fmt.Sprintf("%.0f ms", v)
}
