package benchtrace

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/web"
)

// mustScenarioTrace reads the shipped trace of name, strictly.
func mustScenarioTrace(t *testing.T, name string) (*web.ScenarioTrace, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "static", "traces", name+".json"))
	if err != nil {
		t.Fatalf("%s: %v (regenerate the traces with `go generate ./web`)", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var tr web.ScenarioTrace
	if err := dec.Decode(&tr); err != nil {
		t.Fatalf("%s no longer parses (regenerate it with `go generate ./web`): %v", name, err)
	}
	return &tr, b
}

// figures are a lane's figures, as report.json has them.
func figures(t *testing.T, raw json.RawMessage) bench.ModeReport {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var m bench.ModeReport
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("figures no longer parse as the bench's (regenerate with `go generate ./web`): %v", err)
	}
	return m
}

// Every scenario of the suite ships a trace made from its own run: its
// modes as lanes, every request of each mode once, none lost, a windowed
// lane's slots within its cap, the verdict line the suite's code gives
// for the figures in the file, the bucket where the upstream has one, and
// the file within its budget.
func TestShippedTraces(t *testing.T) {
	names := bench.SuiteScenarios()
	for _, must := range []string{"shared-prefix", "noisy-neighbour", "ratelimited", "overload", "spike", "light"} {
		if !slices.Contains(names, must) {
			t.Errorf("the suite no longer has %s, which the page's picker promises", must)
		}
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			tr, b := mustScenarioTrace(t, name)
			if len(b) > web.TraceBudget {
				t.Errorf("%d bytes; the budget is %d", len(b), web.TraceBudget)
			}
			sc, err := bench.LoadScenario(name)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Format != web.TraceFormat || tr.Name != name || tr.Desc != sc.Description || !slices.Equal(tr.Cols, web.ReqCols) {
				t.Errorf("format %d, name %q, cols %v, description %q; want %d, %q, %v and the scenario's (regenerate with `go generate ./web`)",
					tr.Format, tr.Name, tr.Cols, tr.Desc, web.TraceFormat, name, web.ReqCols)
			}
			var modes []string
			for _, l := range tr.Lanes {
				modes = append(modes, l.Mode)
			}
			if want := sc.DefaultModes(); !slices.Equal(modes, want) {
				t.Errorf("lanes %v; want the modes the suite compares, %v", modes, want)
			}
			for _, l := range tr.Lanes {
				fig := figures(t, l.Figures)
				checkLaneRows(t, l, fig)
				if l.Windowed != sc.Windowed(l.Mode) {
					t.Errorf("%s: windowed %v; want %v", l.Mode, l.Windowed, sc.Windowed(l.Mode))
				}
				if l.Windowed {
					peak := slices.Max(append([]int{0}, l.Series.Gate...))
					if l.Cap < 1 || peak > l.Cap || fig.PeakGateInflight > l.Cap {
						t.Errorf("%s: gate peak %d in the series, %d in the figures; want within the cap %d", l.Mode, peak, fig.PeakGateInflight, l.Cap)
					}
				}
				if n := len(l.Series.Upstream); n == 0 || n > maxSeriesPoints+1 {
					t.Errorf("%s: %d points of upstream in flight; want 1..%d", l.Mode, n, maxSeriesPoints+1)
				}
				if size := sc.Sim.InputTokensPerMinute; size > 0 {
					if tr.Bucket != size || len(l.Series.Bucket) != len(l.Series.Upstream) {
						t.Errorf("%s: bucket %d with %d levels; want %d with one level a point", l.Mode, tr.Bucket, len(l.Series.Bucket), size)
					}
					for _, v := range l.Series.Bucket {
						if v < 0 || v > float64(size) {
							t.Fatalf("%s: bucket level %v outside [0, %d]", l.Mode, v, size)
						}
					}
				}
			}
			if (sc.Alone != nil) != (tr.Alone != nil) {
				t.Errorf("alone %+v; the scenario names %+v", tr.Alone, sc.Alone)
			}
			if tr.Alone != nil {
				for _, raw := range tr.Alone.Figures {
					figures(t, raw)
				}
			}
			v, err := RecomputedVerdict(tr)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Verdict.Line == "" || v.Line != tr.Verdict.Line || v.Outcome != tr.Verdict.Outcome {
				t.Errorf("verdict line in the file:\n  %q (%s)\nbench.VerdictOf on the file's figures:\n  %q (%s)", tr.Verdict.Line, tr.Verdict.Outcome, v.Line, v.Outcome)
			}
			if !strings.HasPrefix(tr.Verdict.Line, v.Subject+" ") {
				t.Errorf("verdict line %q does not start with the mode it judges, %s", tr.Verdict.Line, v.Subject)
			}
			for _, m := range v.Against {
				if !strings.Contains(tr.Verdict.Line, m) {
					t.Errorf("verdict line %q does not name %s, which it is against", tr.Verdict.Line, m)
				}
			}
		})
	}
}

// checkLaneRows checks that a lane has every request of its mode once,
// that none was lost, and that its rows agree with its figures f.
func checkLaneRows(t *testing.T, l web.TraceLane, f bench.ModeReport) {
	t.Helper()
	seen := make([]bool, len(l.Req))
	var outcomes [3]int
	for _, r := range l.Req {
		if len(r) != len(web.ReqCols) {
			t.Fatalf("%s: a row of %d columns; want %d", l.Mode, len(r), len(web.ReqCols))
		}
		id := int(r[web.ColID])
		if id < 0 || id >= len(seen) || seen[id] {
			t.Fatalf("%s: request %d twice or out of 0..%d", l.Mode, id, len(seen)-1)
		}
		seen[id] = true
		outcomes[int(r[web.ColOutcome])]++
		if r[web.ColDone] < r[web.ColArrive] || r[web.ColSlot] >= 0 && r[web.ColSlot] < r[web.ColArrive]-1 {
			t.Errorf("%s: request %d arrives %v, starts upstream %v, done %v: out of order", l.Mode, id, r[web.ColArrive], r[web.ColSlot], r[web.ColDone])
		}
	}
	if len(l.Req) != f.Offered || outcomes[0] != f.Succeeded || outcomes[1] != f.Failed || outcomes[2] != f.Lost {
		t.Errorf("%s: %d rows (%v ok/error/lost); the figures say %d offered, %d succeeded, %d failed, %d lost",
			l.Mode, len(l.Req), outcomes, f.Offered, f.Succeeded, f.Failed, f.Lost)
	}
	if f.Lost != 0 {
		t.Errorf("%s: %d requests lost", l.Mode, f.Lost)
	}
}

// series keeps a long run's peaks and dips within maxSeriesPoints, and a
// step no sample fell in holds the step before's values.
func TestSeriesThinning(t *testing.T) {
	res := &bench.ModeResult{Windowed: true, InputBucketSize: 1000}
	for ms := 0; ms <= 60_000; ms += 10 {
		if ms == 20 {
			continue // a late tick: no sample in the third 10 ms
		}
		s := bench.Sample{T: time.Duration(ms) * time.Millisecond, UpstreamInflight: 2, GateInflight: 2, Queued: 1, InputBucket: 900}
		if ms == 30_010 {
			s.UpstreamInflight, s.GateInflight, s.InputBucket = 9, 8, 5 // one sample's peak and dip
		}
		res.Samples = append(res.Samples, s)
	}
	s := series(res)
	if n := len(s.Upstream); n > maxSeriesPoints || n < maxSeriesPoints/2 || len(s.Gate) != n || len(s.Queued) != n || len(s.Bucket) != n {
		t.Fatalf("%d points (gate %d, queued %d, bucket %d); want up to %d each", n, len(s.Gate), len(s.Queued), len(s.Bucket), maxSeriesPoints)
	}
	if s.StepMS != 110 {
		t.Errorf("step %v ms; want 110, the least multiple of 10 ms that fits 60 s in %d points", s.StepMS, maxSeriesPoints)
	}
	if slices.Max(s.Upstream) != 9 || slices.Max(s.Gate) != 8 || slices.Min(s.Bucket) != 5 {
		t.Errorf("peaks %d, %d and dip %v; want the one sample's 9, 8 and 5", slices.Max(s.Upstream), slices.Max(s.Gate), slices.Min(s.Bucket))
	}
	fine := series(&bench.ModeResult{Samples: res.Samples[:10]})
	if fine.StepMS != 10 || fine.Upstream[2] != 2 || fine.Gate != nil || fine.Bucket != nil {
		t.Errorf("a short plain run: step %v, third point %d, gate %v, bucket %v; want 10 ms, 2 held from the step before, no gate, no bucket",
			fine.StepMS, fine.Upstream[2], fine.Gate, fine.Bucket)
	}
}
