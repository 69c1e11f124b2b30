package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestVerdict(t *testing.T) {
	for _, tc := range []struct {
		name        string
		plain, win  ModeReport
		want, avoid []string
	}{{
		name:  "burst: protects the upstream, pays in latency",
		plain: fig(ModePlain, 24.85, 2337, 2576, 1235, 1408, 64, 0, 0.2769),
		win:   fig(ModeWindowed, 11.95, 2808, 5356, 2551, 4886, 8, 0, 0.2769),
		want: []string{
			"wins on upstream protection (peak upstream 8 vs 64, cap 8 held)",
			"loses on throughput (goodput 0.48x), latency (p50 +471 ms, p99 +2.8 s), TTFT (p50 +1.3 s, p99 +3.5 s)",
			"ties on reliability (failures 0 vs 0), cost (1.00x)",
			"within 5% or 20 ms",
		},
	}, {
		name:  "overload: fewer failures and better p99",
		plain: fig(ModePlain, 10, 900, 9000, 400, 5000, 120, 30, 1.0),
		win:   fig(ModeWindowed, 12, 1500, 4000, 600, 2000, 8, 2, 0.9),
		want: []string{
			"wins on upstream protection (peak upstream 8 vs 120, cap 8 held), throughput (goodput 1.20x), reliability (failures 2 vs 30), latency (p99 -5.0 s), TTFT (p99 -3.0 s), cost (0.90x)",
			"loses on latency (p50 +600 ms), TTFT (p50 +200 ms)",
		},
		avoid: []string{"ties on"},
	}, {
		name: "light load: everything within the tolerance ties",
		// 4% slower and 15 ms on a small figure: both within a tie.
		plain: fig(ModePlain, 5, 100, 1000, 10, 500, 4, 0, 0.10),
		win:   fig(ModeWindowed, 4.9, 115, 1040, 25, 510, 4, 0, 0.102),
		want: []string{
			"ties on upstream protection (peak upstream 4 vs 4, cap 8 held), throughput (goodput 0.98x), reliability (failures 0 vs 0), latency (p50 +15 ms, p99 +40 ms), TTFT (p50 +15 ms, p99 +10 ms), cost (1.02x)",
		},
		avoid: []string{"wins on", "loses on"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := verdict([]ModeReport{tc.plain}, []ModeReport{tc.win})
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("verdict\n  %s\nlacks\n  %s", got, w)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(got, a) {
					t.Errorf("verdict\n  %s\nhas %q", got, a)
				}
			}
			if strings.Contains(got, "\n") {
				t.Errorf("verdict is more than one line: %q", got)
			}
		})
	}
}

func TestVerdictCapExceededAndNoStreams(t *testing.T) {
	p := fig(ModePlain, 1, 100, 200, 0, 0, 20, 0, 1)
	w := fig(ModeWindowed, 1, 100, 200, 0, 0, 9, 0, 1)
	w.PeakGateInflight = 9
	p.TTFTMS, w.TTFTMS = Percentiles{}, Percentiles{}
	got := verdict([]ModeReport{p}, []ModeReport{w})
	if !strings.Contains(got, "cap 8 exceeded") {
		t.Errorf("verdict %q does not say the cap was exceeded", got)
	}
	if strings.Contains(got, "TTFT") {
		t.Errorf("verdict %q compares TTFT of a run without streams", got)
	}
}

func TestVerdictNeedsBothModes(t *testing.T) {
	r := &Report{Modes: []ModeReport{{Mode: ModeDirect}, {Mode: ModePlain}}}
	if v := r.Verdict(); v != "" {
		t.Errorf("verdict without a windowed mode: %q", v)
	}
}

// After repeats the verdict shows medians and judges seed by seed: a
// figure better on one seed and worse on another ties however far apart
// the medians are.
func TestVerdictRepeats(t *testing.T) {
	ps := []ModeReport{
		fig(ModePlain, 10, 1000, 2000, 100, 200, 64, 0, 1),
		fig(ModePlain, 10, 1100, 2100, 100, 200, 64, 0, 1),
		fig(ModePlain, 10, 1200, 9000, 100, 200, 64, 0, 1),
	}
	ws := []ModeReport{
		fig(ModeWindowed, 10, 1500, 3000, 100, 200, 8, 0, 1),
		fig(ModeWindowed, 10, 1600, 3100, 100, 200, 8, 0, 1),
		fig(ModeWindowed, 10, 1700, 3200, 100, 200, 8, 0, 1),
	}
	got := verdict(ps, ws)
	for _, want := range []string{
		"or seeds that disagree; medians of 3 runs",
		"wins on upstream protection (peak upstream 8 vs 64, cap 8 held)",
		"loses on latency (p50 +500 ms)",
		// p99: medians 3100 vs 2100, but the third seed's plain p99 (9000) is worse.
		"latency (p99 +1.0 s)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("verdict\n  %s\nlacks\n  %s", got, want)
		}
	}
	if i, j := strings.Index(got, "ties on"), strings.Index(got, "p99 +1.0 s"); i < 0 || j < i {
		t.Errorf("p99 should tie on seeds that disagree: %s", got)
	}
}

// One report gives one line through every caller: the table's closing
// line is Verdict's, a report read back from report.json (as the page and
// a suite trace's recomputation read it) gives the same lines, the suite's
// summary prints VerdictOf's line as it is, and a figure of the same name
// favours the same side in the table's line and in every kind's.
func TestOneReportOneLine(t *testing.T) {
	run := func(seed int64, plainP50, winP50, plainFailed float64) RunReport {
		p := fig(ModePlain, 10, plainP50, 3000, 100, 200, 64, int(plainFailed), 1)
		w := fig(ModeWindowed, 11, winP50, 2500, 130, 220, 8, 0, 0.9)
		bk := fig(ModeBulk, 6, 4000, 6000, 0, 0, 0, 0, 0.5)
		for _, m := range []*ModeReport{&p, &w, &bk} {
			m.Offered, m.Sent, m.Succeeded, m.UpstreamCalls = 100, 100, 100-m.Failed, 100
			m.LatencyAllMS = Percentiles{N: 100, P99: m.LatencyMS.P99 + 1000*float64(m.Failed)}
			m.InputCostUSD, m.Windowed = m.CostUSD/2, m.Mode == ModeWindowed
		}
		return RunReport{Seed: seed, Arrivals: 100, Modes: []ModeReport{p, w, bk}}
	}
	r := &Report{Scenario: "one-line", Arrivals: 100,
		Repeats: []RunReport{run(1, 1000, 1100, 0), run(2, 1000, 1500, 3), run(3, 1200, 1190, 1)}}
	r.Modes = r.Repeats[0].Modes

	lines := r.Verdict()
	if n := strings.Count(lines, "\n"); n != 1 || !strings.Contains(lines, "verdict, windowed vs plain") || !strings.Contains(lines, "verdict, bulk vs plain") {
		t.Fatalf("Verdict:\n%s\nwant one windowed and one bulk line", lines)
	}
	in := &verdictInput{runs: r.runs()}
	aspects := []ScenarioVerdict{in.aspectsVerdict(ModeWindowed, ModePlain), in.aspectsVerdict(ModeBulk, ModePlain)}
	if want := aspects[0].Line + "\n" + aspects[1].Line; lines != want {
		t.Errorf("Verdict:\n%s\nwant the engine's lines:\n%s", lines, want)
	}
	var tbl strings.Builder
	r.WriteTable(&tbl)
	if !strings.HasSuffix(tbl.String(), lines+"\n") {
		t.Errorf("the table does not end with Verdict's lines:\n%s", tbl.String())
	}

	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Verdict(); got != lines {
		t.Errorf("report.json read back: Verdict\n%s\nwant\n%s", got, lines)
	}
	compared := map[string]bool{}
	for _, kind := range VerdictKinds() {
		v := VerdictOf(kind, r, nil, "b")
		if got := VerdictOf(kind, &back, nil, "b"); got.Line != v.Line || got.Outcome != v.Outcome {
			t.Errorf("%s: read back %q (%s); want %q (%s)", kind, got.Line, got.Outcome, v.Line, v.Outcome)
		}
		var md strings.Builder
		(&Suite{Entries: []SuiteEntry{{Scenario: "one-line", Report: r, Verdict: v}}}).WriteMarkdown(&md)
		if !strings.Contains(md.String(), "**"+v.Line+"**") {
			t.Errorf("%s: the suite's summary lacks the line %q", kind, v.Line)
		}
		// The same figure of the same report favours the same side.
		for _, a := range aspects {
			if a.Subject != v.Subject {
				continue
			}
			for _, af := range a.Figures {
				for _, f := range v.Figures {
					if f.Name != af.Name || !f.Decides {
						continue
					}
					compared[f.Name] = true
					if f.Favours != af.Favours {
						t.Errorf("%s: figure %s favours %s there, %s in the table's line %q", kind, f.Name, f.Favours, af.Favours, a.Line)
					}
				}
			}
		}
	}
	for _, name := range []string{"p50", "failures", "goodput", "cost", "ttft_p50"} {
		if !compared[name] {
			t.Errorf("no kind's line decides on %s: nothing compared it with the table's", name)
		}
	}
}
