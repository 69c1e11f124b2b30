package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// mustScenarioTrace reads the shipped trace of name, strictly.
func mustScenarioTrace(t *testing.T, name string) (*ScenarioTrace, []byte) {
	t.Helper()
	b, err := static.ReadFile(path.Join(traceDir, name+".json"))
	if err != nil {
		t.Fatalf("%s: %v (regenerate the traces with `go generate ./web`)", name, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var tr ScenarioTrace
	if err := dec.Decode(&tr); err != nil {
		t.Fatalf("%s no longer parses (regenerate it with `go generate ./web`): %v", name, err)
	}
	return &tr, b
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
			if len(b) > TraceBudget {
				t.Errorf("%d bytes; the budget is %d", len(b), TraceBudget)
			}
			sc, err := bench.LoadScenario(name)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Format != TraceFormat || tr.Name != name || tr.Desc != sc.Description || !slices.Equal(tr.Cols, ReqCols) {
				t.Errorf("format %d, name %q, cols %v, description %q; want %d, %q, %v and the scenario's (regenerate with `go generate ./web`)",
					tr.Format, tr.Name, tr.Cols, tr.Desc, TraceFormat, name, ReqCols)
			}
			var modes []string
			for _, l := range tr.Lanes {
				modes = append(modes, l.Mode)
			}
			if want := sc.DefaultModes(); !slices.Equal(modes, want) {
				t.Errorf("lanes %v; want the modes the suite compares, %v", modes, want)
			}
			for _, l := range tr.Lanes {
				checkLaneRows(t, l)
				if l.Windowed != sc.Windowed(l.Mode) {
					t.Errorf("%s: windowed %v; want %v", l.Mode, l.Windowed, sc.Windowed(l.Mode))
				}
				if l.Windowed {
					peak := slices.Max(append([]int{0}, l.Series.Gate...))
					if l.Cap < 1 || peak > l.Cap || l.Figures.PeakGateInflight > l.Cap {
						t.Errorf("%s: gate peak %d in the series, %d in the figures; want within the cap %d", l.Mode, peak, l.Figures.PeakGateInflight, l.Cap)
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
			v := tr.RecomputedVerdict()
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
// that none was lost, and that its rows agree with its figures.
func checkLaneRows(t *testing.T, l TraceLane) {
	t.Helper()
	seen := make([]bool, len(l.Req))
	var outcomes [3]int
	for _, r := range l.Req {
		if len(r) != len(ReqCols) {
			t.Fatalf("%s: a row of %d columns; want %d", l.Mode, len(r), len(ReqCols))
		}
		id := int(r[colID])
		if id < 0 || id >= len(seen) || seen[id] {
			t.Fatalf("%s: request %d twice or out of 0..%d", l.Mode, id, len(seen)-1)
		}
		seen[id] = true
		outcomes[int(r[colOutcome])]++
		if r[colDone] < r[colArrive] || r[colSlot] >= 0 && r[colSlot] < r[colArrive]-1 {
			t.Errorf("%s: request %d arrives %v, starts upstream %v, done %v: out of order", l.Mode, id, r[colArrive], r[colSlot], r[colDone])
		}
	}
	f := l.Figures
	if len(l.Req) != f.Offered || outcomes[0] != f.Succeeded || outcomes[1] != f.Failed || outcomes[2] != f.Lost {
		t.Errorf("%s: %d rows (%v ok/error/lost); the figures say %d offered, %d succeeded, %d failed, %d lost",
			l.Mode, len(l.Req), outcomes, f.Offered, f.Succeeded, f.Failed, f.Lost)
	}
	if f.Lost != 0 {
		t.Errorf("%s: %d requests lost", l.Mode, f.Lost)
	}
}

// The default trace still shows what the page says it shows: the
// windowed path serves a larger share with fewer upstream calls per
// success than plain.
func TestDefaultScenarioShowsThePromise(t *testing.T) {
	tr, _ := mustScenarioTrace(t, DefaultScenario)
	var plain, win *bench.ModeReport
	for i, l := range tr.Lanes {
		switch l.Mode {
		case bench.ModePlain:
			plain = &tr.Lanes[i].Figures
		case bench.ModeWindowed:
			win = &tr.Lanes[i].Figures
		}
	}
	if plain == nil || win == nil {
		t.Fatalf("%s has no plain and windowed lanes", DefaultScenario)
	}
	perSuccess := func(m *bench.ModeReport) float64 { return float64(m.UpstreamCalls) / float64(max(m.Succeeded, 1)) }
	if win.Succeeded <= plain.Succeeded || perSuccess(win) >= perSuccess(plain) || win.Upstream529 >= plain.Upstream529 {
		t.Errorf("%s: windowed served %d with %.2f calls a success and %d 529s, plain %d with %.2f and %d; the page says windowed serves more with less",
			DefaultScenario, win.Succeeded, perSuccess(win), win.Upstream529, plain.Succeeded, perSuccess(plain), plain.Upstream529)
	}
	if why := whyDefault(tr); !strings.Contains(why, "served") {
		t.Errorf("the reason shown for the default is %q", why)
	}
}

func getBody(t *testing.T, u string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// The picker's list names every shipped trace and the default; each is
// served as it is embedded; any other name is a 404 of the API's shape,
// never a file outside the traces.
func TestTraceEndpoints(t *testing.T) {
	srv := httptest.NewServer(New(Options{}))
	defer srv.Close()
	resp, b := getBody(t, srv.URL+"/ui/api/traces")
	var list TraceList
	if err := json.Unmarshal(b, &list); resp.StatusCode != 200 || err != nil {
		t.Fatalf("GET /ui/api/traces: %d %v %.200s", resp.StatusCode, err, b)
	}
	if list.Default != DefaultScenario || list.Why == "" {
		t.Errorf("default %q, why %q; want %s with a reason", list.Default, list.Why, DefaultScenario)
	}
	var got []string
	for _, ti := range list.Traces {
		got = append(got, ti.Name)
		resp, b := getBody(t, srv.URL+"/ui/api/traces/"+ti.Name)
		want, err := static.ReadFile(path.Join(traceDir, ti.Name+".json"))
		if ti.Name == PageBurst {
			want, err = static.ReadFile("static/trace-default.json")
		}
		if err != nil || resp.StatusCode != 200 || !bytes.Equal(b, want) || ti.Bytes != len(want) {
			t.Errorf("GET %s: %d, %d bytes (listed %d); want 200 and the %d embedded bytes", ti.Name, resp.StatusCode, len(b), ti.Bytes, len(want))
		}
		if ti.Name != PageBurst && ti.Verdict == "" {
			t.Errorf("%s is listed without its verdict line", ti.Name)
		}
	}
	want := append(bench.SuiteScenarios(), PageBurst)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("listed %v; want the suite's scenarios and %s: %v", got, PageBurst, want)
	}
	for _, bad := range []string{"nope", "..%2F..%2Fweb.go", "%2e%2e", "overload.json", "a/b", "..%2Ftrace-default"} {
		resp, b := getBody(t, srv.URL+"/ui/api/traces/"+bad)
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if err := json.Unmarshal(b, &e); resp.StatusCode != 404 || err != nil || e.Type != "error" || e.Error.Type != "not_found_error" {
			t.Errorf("GET /ui/api/traces/%s: %d %.200s; want 404 not_found_error", bad, resp.StatusCode, b)
		}
		if bytes.Contains(b, []byte("package web")) {
			t.Errorf("GET /ui/api/traces/%s served a source file", bad)
		}
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
