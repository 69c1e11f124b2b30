package bench

import (
	"fmt"
	"slices"
)

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

// budgetVerdict, for a tenant whose runaway loop meets its budget while
// the others go on: what the runaway spent of its budget (the overshoot:
// what was in flight when it was crossed) and how many of its requests
// were refused, then the others' served share and their worst p99 as a
// multiple of their p99 alone (the companion run without the runaway,
// same mode), which decide: a budget should leave them untouched.
func budgetVerdict(in *verdictInput) ScenarioVerdict {
	s, base := in.pick([]string{ModeWindowed}, []string{ModePlain})
	b := newVerdict(s, base)
	first := in.runs[0].Mode(s)
	if first == nil || len(first.Budgets) == 0 {
		b.note("no budget in the scenario")
		return b.done(len(in.runs))
	}
	runaway := first.Budgets[0]
	budgetOf := func(m *ModeReport) BudgetReport {
		for _, br := range m.Budgets {
			if br.Tenant == runaway.Tenant {
				return br
			}
		}
		return BudgetReport{}
	}
	spent := func(m *ModeReport) float64 { return budgetOf(m).SpentUSD }
	b.pair("runaway_spent", runaway.Tenant+" spent", in.vals(s, spent), in.vals(base, spent), usd, -1)
	over := func(m *ModeReport) float64 { br := budgetOf(m); return quotient(br.OvershootUSD, br.LimitUSD) }
	b.add("runaway_overshoot", fmt.Sprintf("of its $%.2f budget: overshoot", runaway.LimitUSD), in.vals(s, over), pct, -1)
	refused := func(m *ModeReport) float64 { return float64(budgetOf(m).Refused) }
	b.pair("runaway_refused", "402s", in.vals(s, refused), in.vals(base, refused), count, -1)

	budgeted := func(tenant string) bool {
		return slices.ContainsFunc(first.Budgets, func(br BudgetReport) bool { return br.Tenant == tenant })
	}
	served := func(m *ModeReport) float64 {
		sent, ok := 0, 0
		for _, t := range m.Tenants {
			if !budgeted(t.Tenant) {
				sent, ok = sent+t.Sent, ok+t.Succeeded
			}
		}
		return quotient(float64(ok), float64(sent))
	}
	ss, bs := in.vals(s, served), in.vals(base, served)
	b.pair("others_served", "the others served", ss, bs, pct, judge(ss, bs, 0, true))
	// worst is the others' worst p99 in mode, over its p99 alone when the
	// companion ran, run by run.
	worst := func(mode string) []float64 {
		out := make([]float64, len(in.runs))
		for i, r := range in.runs {
			m := r.Mode(mode)
			if m == nil {
				continue
			}
			for _, t := range m.Tenants {
				if budgeted(t.Tenant) || t.LatencyMS.N == 0 {
					continue
				}
				v := t.LatencyMS.P99
				if i < len(in.alone) {
					a := in.alone[i].Mode(mode)
					if a == nil && len(in.alone[i].Modes) > 0 {
						a = &in.alone[i].Modes[0]
					}
					if a == nil {
						continue
					}
					j := slices.IndexFunc(a.Tenants, func(at TenantReport) bool { return at.Tenant == t.Tenant })
					if j < 0 || a.Tenants[j].LatencyMS.N == 0 {
						continue
					}
					v = quotient(v, a.Tenants[j].LatencyMS.P99)
				}
				out[i] = max(out[i], v)
			}
		}
		return out
	}
	format, floor := func(v float64) string { return times(v) + " alone" }, 0.0
	if len(in.alone) == 0 {
		format, floor = func(v float64) string { return fmt.Sprintf("%.0f ms", v) }, VerdictFloorMS
	}
	sw, bw := worst(s), worst(base)
	b.pair("others_p99", "their worst p99", sw, bw, format, judge(sw, bw, floor, false))
	return b.done(len(in.runs))
}
