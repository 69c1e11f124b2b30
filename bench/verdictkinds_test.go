package bench

import (
	"maps"
	"strings"
	"testing"
)

// rep is a one-run report of the given modes.
func rep(modes ...ModeReport) *Report { return &Report{Arrivals: modes[0].Offered, Modes: modes} }

func mode(name string, f func(m *ModeReport)) ModeReport {
	m := ModeReport{Mode: name, Windowed: name != ModePlain && name != ModeDirect, Offered: 100, Sent: 100, Succeeded: 100}
	if f != nil {
		f(&m)
	}
	return m
}

// checkLine fails unless the line has every want, and its outcome is
// the one the deciding figures give (checkVerdict).
func checkLine(t *testing.T, v ScenarioVerdict, outcome string, want ...string) {
	t.Helper()
	if v.Outcome != outcome {
		t.Errorf("outcome %s; want %s: %s", v.Outcome, outcome, v.Line)
	}
	for _, w := range want {
		if !strings.Contains(v.Line, w) {
			t.Errorf("verdict\n  %s\nlacks\n  %s", v.Line, w)
		}
	}
	if strings.Contains(v.Line, "\n") {
		t.Errorf("more than one line: %q", v.Line)
	}
	checkVerdict(t, v)
}

func TestLatencyVerdict(t *testing.T) {
	// Light load: plain's peak within the cap, windowed 12 ms slower at
	// p50 (a tie within 20 ms) and 90 ms at p99: it loses, with nothing to
	// protect.
	r := rep(mode(ModeDirect, nil),
		mode(ModePlain, func(m *ModeReport) { m.LatencyMS.P50, m.LatencyMS.P99, m.PeakUpstreamInflight = 600, 1000, 4 }),
		mode(ModeWindowed, func(m *ModeReport) {
			m.LatencyMS.P50, m.LatencyMS.P99, m.PeakUpstreamInflight, m.Cap = 612, 1090, 4, 8
		}))
	v := VerdictOf("", r, nil, "")
	checkLine(t, v, "loses", "windowed loses vs plain: p50 +12 ms, p99 +90 ms, peak upstream in flight 4 vs 4, nothing to protect at this load")
	if strings.Contains(v.Line, "failures") {
		t.Errorf("failures named with none: %s", v.Line)
	}
	// A tail with failures is the all-requests p99.
	r.Modes[1].Failed, r.Modes[1].Succeeded, r.Modes[1].LatencyAllMS.P99 = 10, 90, 5000
	r.Modes[2].LatencyAllMS.P99 = 1090
	r.Modes[1].PeakUpstreamInflight = 40
	checkLine(t, VerdictOf("latency", r, nil, ""), "wins", "p50 +12 ms, all-requests p99 -3.9 s", "failures 0 vs 10", "peak upstream in flight 4 vs 40, cap 8")
}

func TestOverloadVerdict(t *testing.T) {
	r := rep(
		mode(ModePlain, func(m *ModeReport) {
			m.Succeeded, m.Failed, m.UpstreamCalls, m.LatencyAllMS.P99, m.CostUSD = 60, 40, 240, 9000, 0.3
		}),
		mode(ModeWindowed, func(m *ModeReport) {
			m.Succeeded, m.UpstreamCalls, m.LatencyAllMS.P99, m.CostUSD = 98, 100, 6000, 0.2
			m.Failed = 2
		}))
	checkLine(t, VerdictOf("overload", r, nil, ""), "wins",
		"windowed wins vs plain: served 98% vs 60%, upstream calls per success 1.02 vs 4.00, all-requests p99 -3.0 s, cost $0.2000 vs $0.3000")
	// Nothing served on one side: the work per success is unbounded, and
	// the figure stays a number report.json can hold.
	r.Modes[0].Succeeded = 0
	v := VerdictOf("overload", r, nil, "")
	checkLine(t, v, "wins", "served 98% vs 0%", "1.02 vs ∞")
}

func TestCacheVerdict(t *testing.T) {
	r := rep(
		mode(ModePlain, func(m *ModeReport) {
			m.InputCostUSD, m.Tokens.CacheCreation, m.TTFTMS.P50, m.TTFTMS.P99 = 0.6, 160000, 300, 1200
		}),
		mode(ModeWindowed, func(m *ModeReport) {
			m.InputCostUSD, m.Tokens.CacheCreation, m.TTFTMS.P50, m.TTFTMS.P99 = 0.078, 10000, 341, 1500
		}))
	checkLine(t, VerdictOf("cache", r, nil, ""), "mixed",
		"windowed mixed vs plain: input cost 0.13×, cache writes (tokens) 10000 vs 160000, TTFT p50 +41 ms, TTFT p99 +300 ms")
	r.Modes[1].TTFTMS.P50 = 305 // within 20 ms: a tie, the cost decides
	checkLine(t, VerdictOf("cache", r, nil, ""), "wins", "TTFT p50 +5 ms")
}

func TestRatelimitVerdict(t *testing.T) {
	r := rep(
		mode(ModePlain, func(m *ModeReport) {
			m.Upstream429, m.UpstreamCalls, m.GoodputRPS, m.Succeeded, m.LatencyMS.P99, m.LatencyAllMS.P99 = 40, 90, 0.4, 30, 60000, 60000
			m.Offered, m.Sent = 30, 30
		}),
		mode(ModeWindowed, func(m *ModeReport) {
			m.UpstreamCalls, m.GoodputRPS, m.Succeeded, m.LatencyMS.P99, m.LatencyAllMS.P99 = 30, 0.6, 30, 20000, 20000
			m.Offered, m.Sent = 30, 30
		}),
		mode("reset", func(m *ModeReport) { m.GoodputRPS, m.LatencyAllMS.P99 = 0.2, 72000 }))
	checkLine(t, VerdictOf("ratelimit", r, nil, ""), "wins",
		"windowed wins vs plain: upstream 429s 0 vs 40, upstream calls per success 1.00 vs 3.00, goodput 1.50×, p99 -40.0 s, reset: goodput 0.50×, all-requests p99 72.0 s")
}

func TestTenantsVerdict(t *testing.T) {
	b := func(p99 float64) []TenantReport {
		return []TenantReport{{Tenant: "a"}, {Tenant: "b", LatencyMS: Percentiles{N: 40, P99: p99}}}
	}
	r := rep(
		mode(ModePlain, func(m *ModeReport) { m.Tenants = b(8300) }),
		mode(ModeWindowedFIFO, func(m *ModeReport) { m.Tenants = b(61000) }),
		mode(ModeWindowed, func(m *ModeReport) { m.Tenants = b(1050) }))
	alone := rep(
		mode(ModePlain, func(m *ModeReport) { m.Tenants = b(1000)[1:] }),
		mode(ModeWindowedFIFO, func(m *ModeReport) { m.Tenants = b(1000)[1:] }),
		mode(ModeWindowed, func(m *ModeReport) { m.Tenants = b(1000)[1:] }))
	checkLine(t, VerdictOf("tenants", r, alone, "b"), "wins",
		"windowed wins vs plain, windowed-fifo: b's p99 1.05× alone, plain 8.30×, windowed-fifo 61.00×")
	// Without the companion: the tenant's p99 itself.
	checkLine(t, VerdictOf("tenants", r, nil, "b"), "wins", "b's p99 1050 ms, plain 8300 ms")
	// Alone as slow as with the neighbour: the tenant lost nothing, a tie.
	r.Modes[0].Tenants, r.Modes[1].Tenants = b(1040), b(1060)
	checkLine(t, VerdictOf("tenants", r, alone, "b"), "ties", "b's p99 1.05× alone, plain 1.04×")
}

func TestCapacityVerdict(t *testing.T) {
	r := rep(
		mode("static-8", func(m *ModeReport) { m.GoodputRPS, m.LatencyAllMS.P99 = 20, 4000 }),
		mode("static-32", func(m *ModeReport) { m.GoodputRPS, m.Failed, m.Succeeded, m.LatencyAllMS.P99 = 40, 154, 80, 9000 }),
		mode("adaptive", func(m *ModeReport) { m.GoodputRPS, m.LatencyAllMS.P99 = 39, 1500 }))
	checkLine(t, VerdictOf("capacity", r, nil, ""), "wins",
		"adaptive wins vs static-8, static-32: goodput vs static-8 1.95×, failures 0 vs 0, goodput vs static-32 0.97×, failures 0 vs 154, all-requests p99 1500 ms, static-8 4000 ms, static-32 9000 ms")
}

// After repeats each figure is the median and range of its per-seed
// values, and seeds that disagree tie.
func TestScenarioVerdictRepeats(t *testing.T) {
	run := func(seed int64, p, w float64) RunReport {
		return RunReport{Seed: seed, Modes: []ModeReport{
			mode(ModePlain, func(m *ModeReport) { m.LatencyMS.P50, m.LatencyMS.P99 = p, p }),
			mode(ModeWindowed, func(m *ModeReport) { m.LatencyMS.P50, m.LatencyMS.P99 = w, w }),
		}}
	}
	r := &Report{Repeats: []RunReport{run(1, 500, 600), run(2, 520, 650), run(3, 700, 610)}}
	r.Modes = r.Repeats[0].Modes
	v := VerdictOf("latency", r, nil, "")
	// p50 deltas +100, +130, -90: the third seed disagrees.
	checkLine(t, v, "ties", "p50 +100 ms [-90 ms .. +130 ms]", "(medians [ranges] of 3 seeds)")
}

// A difference every seed shows decides though the two sides' ranges
// overlap (seed 3's plain is slower than seed 1's windowed), and a seed on
// which both sides are equal does not cancel the seeds that differ.
func TestScenarioVerdictJudgesSeedBySeed(t *testing.T) {
	run := func(seed int64, p, w float64) RunReport {
		return RunReport{Seed: seed, Modes: []ModeReport{
			mode(ModePlain, func(m *ModeReport) { m.LatencyMS.P50, m.LatencyMS.P99 = p, p }),
			mode(ModeWindowed, func(m *ModeReport) { m.LatencyMS.P50, m.LatencyMS.P99 = w, w }),
		}}
	}
	r := &Report{Repeats: []RunReport{run(1, 500, 600), run(2, 550, 700), run(3, 900, 1000)}}
	r.Modes = r.Repeats[0].Modes
	checkLine(t, VerdictOf("latency", r, nil, ""), "loses", "p50 +100 ms [+100 ms .. +150 ms]")

	r = &Report{Repeats: []RunReport{run(1, 500, 300), run(2, 500, 500), run(3, 600, 350)}}
	r.Modes = r.Repeats[0].Modes
	checkLine(t, VerdictOf("latency", r, nil, ""), "wins", "p50 -200 ms [-250 ms .. ±0 ms]")
}

func TestBudgetVerdict(t *testing.T) {
	tenants := func(aP99 float64, bOK int) []TenantReport {
		return []TenantReport{{Tenant: "runaway", Sent: 400, Succeeded: 100, LatencyMS: Percentiles{N: 100, P99: 9000}},
			{Tenant: "a", Sent: 40, Succeeded: 40, LatencyMS: Percentiles{N: 40, P99: aP99}},
			{Tenant: "b", Sent: 40, Succeeded: bOK, LatencyMS: Percentiles{N: bOK, P99: 1000}}}
	}
	budgets := func(spent float64, refused int) []BudgetReport {
		return []BudgetReport{{Tenant: "runaway", LimitUSD: 1, SpentUSD: spent, OvershootUSD: spent - 1, Refused: refused}}
	}
	r := rep(
		mode(ModePlain, func(m *ModeReport) { m.Tenants, m.Budgets = tenants(2000, 36), budgets(1.3, 290) }),
		mode(ModeWindowed, func(m *ModeReport) { m.Tenants, m.Budgets = tenants(1050, 40), budgets(1.12, 300) }))
	alone := rep(
		mode(ModePlain, func(m *ModeReport) { m.Tenants = tenants(1000, 40)[1:] }),
		mode(ModeWindowed, func(m *ModeReport) { m.Tenants = tenants(1000, 40)[1:] }))
	checkLine(t, VerdictOf("budget", r, alone, "a"), "wins",
		"windowed wins vs plain: runaway spent $1.1200 vs $1.3000, of its $1.00 budget: overshoot 12%, 402s 300 vs 290, the others served 100% vs 95%, their worst p99 1.05× alone vs 2.00× alone")
	// The others untouched in both: a tie.
	r.Modes[0].Tenants = tenants(1040, 40)
	checkLine(t, VerdictOf("budget", r, alone, "a"), "ties", "the others served 100% vs 100%, their worst p99 1.05× alone vs 1.04× alone")
	// Without the companion: their p99 itself.
	checkLine(t, VerdictOf("budget", r, nil, "a"), "ties", "their worst p99 1050 ms vs 1040 ms")
}

func TestKeyPoolVerdict(t *testing.T) {
	// tokens is a mode's answers' input over span seconds: w written, r
	// read (no uncached input).
	tokens := func(w, r int64, span float64) func(m *ModeReport) {
		return func(m *ModeReport) { m.Tokens.CacheCreation, m.Tokens.CacheRead, m.SpanS = w, r, span }
	}
	r := rep(
		mode("one-key", func(m *ModeReport) { tokens(60000, 120000, 60)(m); m.Succeeded = 90 }),
		mode("round-robin", func(m *ModeReport) { tokens(90000, 90000, 45)(m); m.Upstream429 = 4 }),
		mode("routed", func(m *ModeReport) {
			tokens(60000, 120000, 40)(m)
			m.UpstreamByKey = map[string]int64{"pool/2": 40, "pool/1": 60}
		}))
	checkLine(t, VerdictOf("keypool", r, nil, ""), "wins",
		"routed wins vs one-key, round-robin: routed: served 100%, upstream 429s 0, goodput 270k input tokens/min (90k counted by the limits), cache reads 67%, calls by key pool/1 60, pool/2 40; "+
			"one-key: served 90%, upstream 429s 0, goodput 180k input tokens/min (60k counted by the limits), cache reads 67%; "+
			"round-robin: served 100%, upstream 429s 4, goodput 240k input tokens/min (120k counted by the limits), cache reads 50%")
	v := VerdictOf("keypool", r, nil, "")
	favours := map[string]string{}
	for _, f := range v.Figures {
		if f.Decides {
			favours[f.Name] = f.Favours
		}
	}
	want := map[string]string{
		"served_one-key": "wins", "upstream_429_one-key": "ties", "goodput_itpm_one-key": "wins", "cache_read_share_one-key": "ties",
		"served_round-robin": "ties", "upstream_429_round-robin": "wins", "goodput_itpm_round-robin": "wins", "cache_read_share_round-robin": "wins",
	}
	if !maps.Equal(favours, want) {
		t.Errorf("deciding figures %v; want %v", favours, want)
	}
	// Without its modes (any other scenario's report) it still makes a line.
	if v := VerdictOf("keypool", rep(mode(ModePlain, nil), mode(ModeWindowed, nil)), nil, ""); v.Line == "" {
		t.Error("no line for a report of plain and windowed")
	}
}

func TestFailoverVerdict(t *testing.T) {
	r := rep(
		mode("one-backend", func(m *ModeReport) { m.Succeeded, m.Failed, m.LatencyAllMS.P99, m.Upstream529 = 62, 38, 5460, 196 }),
		mode("two-backends", func(m *ModeReport) {
			m.LatencyAllMS.P99, m.Upstream529, m.UpstreamByKey = 659, 1, map[string]int64{"primary/1": 1, "secondary/1": 100}
		}))
	checkLine(t, VerdictOf("failover", r, nil, ""), "wins",
		"two-backends wins vs one-backend: served 100% vs 62%, all-requests p99 659 ms vs 5.5 s, upstream 529s 1 vs 196, calls by key (two-backends) primary/1 1, secondary/1 100")
	// The same served, a tail within 20 ms: a tie.
	r.Modes[0].Succeeded, r.Modes[0].Failed, r.Modes[0].LatencyAllMS.P99 = 100, 0, 670
	checkLine(t, VerdictOf("failover", r, nil, ""), "ties", "served 100% vs 100%, all-requests p99 659 ms vs 670 ms")
}
