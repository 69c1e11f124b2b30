package web

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// ScenarioTrace is one suite scenario's run as the page replays it: a file
// of web/static/traces/, written by gentrace from bench.RunSuite's entry
// for the scenario (one seed, the modes the suite compares), so its
// verdict line is the suite's own. Times are milliseconds since the run's
// start, to 0.1 ms.
type ScenarioTrace struct {
	Format    int          `json:"format"` // TraceFormat
	Name      string       `json:"name"`
	Desc      string       `json:"desc"`
	Generated time.Time    `json:"generated"`
	Version   string       `json:"version"` // the sluice build that ran
	Seed      int64        `json:"seed"`
	Verdict   TraceVerdict `json:"verdict"`
	// Cap is the windowed modes' BATCH_MAX_CONCURRENCY as the scenario
	// sets it; each lane has its own (a variant may set another).
	Cap int `json:"cap"`
	// Bucket is the size of the simulator's input-token bucket (its limit
	// a minute), when it has one: the lanes' series then carry its level.
	Bucket int `json:"bucket,omitempty"`
	// Slots and OverloadAt are the simulated upstream's generation slots
	// (beyond them calls share its speed) and the count in flight from
	// which it answers 529, as the scenario starts them (0: none).
	Slots      int                  `json:"slots,omitempty"`
	OverloadAt int                  `json:"overload_at,omitempty"`
	Spikes     []bench.SpikeSummary `json:"spikes,omitempty"`
	Tenants    []string             `json:"tenants,omitempty"`
	// Cols names the columns of each lane's rows (ReqCols).
	Cols  []string    `json:"cols"`
	Lanes []TraceLane `json:"lanes"`
	// Alone is the companion run's figures (the tenant alone), which the
	// verdict compares against; the page shows no lanes for it.
	Alone *TraceAlone `json:"alone,omitempty"`
}

// TraceFormat is the version of ScenarioTrace's layout.
const TraceFormat = 1

// TraceVerdict is the suite's verdict line for the run and what it was
// computed from: bench.VerdictOf(Kind, the lanes' figures, the alone
// figures, Tenant).
type TraceVerdict struct {
	Kind    string `json:"kind"`
	Line    string `json:"line"`
	Outcome string `json:"outcome"`
	Tenant  string `json:"tenant,omitempty"`
}

// TraceAlone is a scenario's companion run, by its figures.
type TraceAlone struct {
	Name    string             `json:"name"`
	Tenant  string             `json:"tenant"`
	Figures []bench.ModeReport `json:"figures"`
}

// TraceLane is one mode's run: each request's life, the sampled gauges,
// and the mode's figures as report.json has them.
type TraceLane struct {
	Mode     string `json:"mode"`
	Windowed bool   `json:"windowed,omitempty"`
	Cap      int    `json:"cap,omitempty"`
	// Req has one row per request, in request id order, of ReqCols.
	Req     [][]float64      `json:"req"`
	Series  TraceSeries      `json:"series"`
	Figures bench.ModeReport `json:"figures"`
}

// ReqCols are the columns of a lane's rows: id is the request's in the
// workload, the same in every lane. A time a request never
// reached is -1. outcome: 0 ok, 1 error, 2 lost. cache: 0 neither, 1 wrote
// the prompt cache without reading it (a leader, or each request on a
// cold prefix), 2 read it (a follower, or a warm prefix). tenant: an index
// into Tenants. slot is the start of the last attempt's upstream call.
var ReqCols = []string{"id", "arrive", "slot", "first", "done", "outcome", "status", "retries", "stream", "cache", "tenant"}

// The indices of ReqCols.
const (
	colID = iota
	colArrive
	colSlot
	colFirst
	colDone
	colOutcome
	colStatus
	colRetries
	colStream
	colCache
	colTenant
)

// TraceSeries is the bench's sampled gauges at a fixed step, each point
// the peak (for the bucket: the lowest level) of the samples in its step,
// so that a peak or a dip survives the thinning.
type TraceSeries struct {
	StepMS   float64   `json:"step"`
	Upstream []int     `json:"up"`               // requests in generation at the simulator
	Gate     []int     `json:"gate,omitempty"`   // gate slots held (windowed modes)
	Queued   []int     `json:"queued,omitempty"` // waiting in sluice (window or slot)
	Bucket   []float64 `json:"bucket,omitempty"` // the input-token bucket's level, whole tokens
}

// maxSeriesPoints bounds a lane's series: enough for a chart as wide as a
// screen, small enough for the file's budget.
const maxSeriesPoints = 600

// TraceBudget is the most a shipped trace may weigh.
const TraceBudget = 300 << 10

// SuiteTrace is the page's trace of one suite entry (bench.RunSuite's,
// run with one seed).
func SuiteTrace(e bench.SuiteEntry, sc *bench.Scenario) (*ScenarioTrace, error) {
	rep := e.Report
	if rep == nil || len(rep.Results()) == 0 {
		return nil, fmt.Errorf("%s: no run to trace", e.Scenario)
	}
	tr := &ScenarioTrace{Format: TraceFormat, Name: e.Scenario, Desc: e.Description, Generated: time.Now().UTC().Truncate(time.Second),
		Version: rep.Version, Seed: rep.Seed, Cap: rep.Sluice.MaxConcurrency, Spikes: rep.Spikes, Cols: ReqCols,
		Slots: sc.Sim.Capacity, OverloadAt: sc.Sim.OverloadAt,
		Verdict: TraceVerdict{Kind: e.Verdict.Kind, Line: e.Verdict.Line, Outcome: e.Verdict.Outcome, Tenant: e.Tenant}}
	for _, tw := range sc.Workload.Tenants {
		tr.Tenants = append(tr.Tenants, tw.Name)
	}
	tenant := map[string]float64{}
	for i, n := range tr.Tenants {
		tenant[n] = float64(i)
	}
	for _, res := range rep.Results() {
		fig := rep.Mode(res.Mode)
		if fig == nil {
			return nil, fmt.Errorf("%s: mode %s has no figures", e.Scenario, res.Mode)
		}
		l := TraceLane{Mode: res.Mode, Windowed: res.Windowed, Cap: res.Cap, Figures: *fig, Series: series(res)}
		tr.Bucket = max(tr.Bucket, res.InputBucketSize)
		recs := slices.Clone(res.Records)
		sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
		for _, r := range recs {
			l.Req = append(l.Req, row(r, tenant))
		}
		tr.Lanes = append(tr.Lanes, l)
	}
	if e.AloneReport != nil {
		tr.Alone = &TraceAlone{Name: e.Alone, Tenant: e.Tenant, Figures: e.AloneReport.Modes}
	}
	return tr, nil
}

// tenth rounds a time in ms to 0.1 ms.
func tenth(v float64) float64 { return math.Round(v*10) / 10 }

func row(r bench.Record, tenant map[string]float64) []float64 {
	opt := func(p *float64) float64 {
		if p == nil {
			return -1
		}
		return tenth(*p)
	}
	out := make([]float64, len(ReqCols))
	out[colID] = float64(r.ID)
	out[colArrive], out[colSlot], out[colFirst], out[colDone] = tenth(r.ArrivalMS), opt(r.SlotMS), opt(r.FirstTokenMS), tenth(r.DoneMS)
	switch r.Outcome {
	case "ok":
	case "lost":
		out[colOutcome] = 2
	default:
		out[colOutcome] = 1
	}
	out[colStatus], out[colRetries] = float64(r.Status), float64(r.Retries)
	if r.Stream {
		out[colStream] = 1
	}
	out[colCache] = float64(cacheRole(r))
	out[colTenant] = tenant[r.Tenant]
	return out
}

// cacheRole is a request's part in the prompt cache from its tokens, as
// the report splits its TTFT: 2 read (a follower, or a warm prefix), 1
// wrote without reading (a leader, or everyone on a cold prefix), 0
// neither.
func cacheRole(r bench.Record) int {
	switch {
	case r.CacheRead > 0:
		return 2
	case r.CacheWrite > 0:
		return 1
	}
	return 0
}

// series thins res's samples to at most maxSeriesPoints steps of a whole
// number of the bench's 10 ms.
func series(res *bench.ModeResult) TraceSeries {
	var end time.Duration
	if n := len(res.Samples); n > 0 {
		end = res.Samples[n-1].T
	}
	step := 10 * time.Millisecond
	for end/step >= maxSeriesPoints {
		step += 10 * time.Millisecond
	}
	s := TraceSeries{StepMS: float64(step) / float64(time.Millisecond)}
	n := int(end/step) + 1
	if len(res.Samples) == 0 {
		n = 0
	}
	s.Upstream = make([]int, n)
	if res.Windowed {
		s.Gate, s.Queued = make([]int, n), make([]int, n)
	}
	if res.InputBucketSize > 0 {
		s.Bucket = make([]float64, n)
	}
	seen := make([]bool, n)
	for _, x := range res.Samples {
		i := int(x.T / step)
		if !seen[i] {
			seen[i] = true
			if s.Bucket != nil {
				s.Bucket[i] = math.Inf(1)
			}
		}
		s.Upstream[i] = max(s.Upstream[i], x.UpstreamInflight)
		if res.Windowed {
			s.Gate[i], s.Queued[i] = max(s.Gate[i], x.GateInflight), max(s.Queued[i], x.Queued)
		}
		if s.Bucket != nil {
			s.Bucket[i] = min(s.Bucket[i], math.Round(x.InputBucket))
		}
	}
	// A step no sample fell in (the ticker is late now and then) holds
	// the step before's values, not zeros that never happened.
	for i := 1; i < n; i++ {
		if seen[i] {
			continue
		}
		s.Upstream[i] = s.Upstream[i-1]
		if res.Windowed {
			s.Gate[i], s.Queued[i] = s.Gate[i-1], s.Queued[i-1]
		}
		if s.Bucket != nil {
			s.Bucket[i] = s.Bucket[i-1]
		}
	}
	return s
}

// RecomputedVerdict recomputes the trace's verdict line with the suite's code from
// the figures the file carries.
func (tr *ScenarioTrace) RecomputedVerdict() bench.ScenarioVerdict {
	rep := &bench.Report{Scenario: tr.Name, Seed: tr.Seed}
	for _, l := range tr.Lanes {
		rep.Modes = append(rep.Modes, l.Figures)
	}
	var alone *bench.Report
	if tr.Alone != nil {
		alone = &bench.Report{Scenario: tr.Alone.Name, Seed: tr.Seed, Modes: tr.Alone.Figures}
	}
	return bench.VerdictOf(tr.Verdict.Kind, rep, alone, tr.Verdict.Tenant)
}

// DefaultScenario is the trace the page shows first: overload, where the
// upstream is offered about three times what it serves and refuses the
// excess with 529s. It is the seed's promise in one picture: sent
// blindly, most calls are refused and retried into more refusals; through
// the window and the cap the upstream stays within its slots and most
// requests are served.
const DefaultScenario = "overload"

// PageBurst is the name of the page's own burst trace
// (trace-default.json, web.Run of DefaultParams) among the shipped ones.
const PageBurst = "page-burst"

// TraceInfo is one shipped trace in the picker's list.
type TraceInfo struct {
	Name    string `json:"name"`
	Desc    string `json:"desc"`
	Verdict string `json:"verdict"`
	Outcome string `json:"outcome,omitempty"`
	Lanes   int    `json:"lanes"`
	Bytes   int    `json:"bytes"`
}

// TraceList is GET /ui/api/traces.
type TraceList struct {
	Default string      `json:"default"`
	Why     string      `json:"why"` // why the default was chosen, from its figures
	Traces  []TraceInfo `json:"traces"`
}

// traceDir is where the suite's traces are in the embedded files.
const traceDir = "static/traces"

// shipped is the embedded traces, read once: the list, and each file by
// name (only these names are served).
type shipped struct {
	once  sync.Once
	err   error
	list  TraceList
	files map[string][]byte
}

func (s *shipped) load() error {
	s.once.Do(func() {
		s.files = map[string][]byte{}
		b, err := static.ReadFile("static/trace-default.json")
		if err != nil {
			s.err = err
			return
		}
		var burst Trace
		if err := json.Unmarshal(b, &burst); err != nil {
			s.err = fmt.Errorf("trace-default.json: %w", err)
			return
		}
		s.files[PageBurst] = b
		burstInfo := TraceInfo{Name: PageBurst, Desc: burstDesc(burst.Params), Verdict: burst.Verdict, Lanes: len(burst.Lanes), Bytes: len(b)}
		entries, _ := fs.ReadDir(static, traceDir)
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), ".json")
			if !ok || e.IsDir() {
				continue
			}
			b, err := static.ReadFile(path.Join(traceDir, e.Name()))
			if err != nil {
				s.err = err
				return
			}
			var tr ScenarioTrace
			if err := json.Unmarshal(b, &tr); err != nil {
				s.err = fmt.Errorf("%s: %w", e.Name(), err)
				return
			}
			s.files[name] = b
			s.list.Traces = append(s.list.Traces, TraceInfo{Name: name, Desc: tr.Desc, Verdict: tr.Verdict.Line,
				Outcome: tr.Verdict.Outcome, Lanes: len(tr.Lanes), Bytes: len(b)})
			if name == DefaultScenario {
				s.list.Default, s.list.Why = name, whyDefault(&tr)
			}
		}
		s.list.Traces = append(s.list.Traces, burstInfo)
		if s.list.Default == "" {
			s.list.Default = PageBurst
		}
	})
	return s.err
}

func burstDesc(p Params) string {
	return fmt.Sprintf("The page's own burst: %d requests at once through plain and windowed (web.DefaultParams), client retries off.", p.Burst)
}

// whyDefault is the sentence under the default trace, its figures read
// from the trace: the share served and the upstream calls per success of
// plain and windowed.
func whyDefault(tr *ScenarioTrace) string {
	var plain, win *bench.ModeReport
	for i := range tr.Lanes {
		switch tr.Lanes[i].Mode {
		case bench.ModePlain:
			plain = &tr.Lanes[i].Figures
		case bench.ModeWindowed:
			win = &tr.Lanes[i].Figures
		}
	}
	if plain == nil || win == nil {
		return ""
	}
	share := func(m *bench.ModeReport) string {
		return strconv.Itoa(int(math.Round(100*float64(m.Succeeded)/float64(max(m.Offered, 1))))) + " %"
	}
	per := func(m *bench.ModeReport) string {
		return strconv.FormatFloat(float64(m.UpstreamCalls)/float64(max(m.Succeeded, 1)), 'f', 2, 64)
	}
	return fmt.Sprintf("Shown first because it is the seed's promise under the hardest load: offered about three times what the upstream can serve, "+
		"the plain path melts down into refusals and retries (%s served, %s upstream calls per success, %d upstream 529s) "+
		"while the windowed path holds the upstream at its cap and serves %s with %s calls per success, paying for it in queueing.",
		share(plain), per(plain), plain.Upstream529, share(win), per(win))
}

// traces serves GET /ui/api/traces.
func (h *Handler) traces(w http.ResponseWriter, r *http.Request) {
	if err := h.shipped.load(); err != nil {
		writeError(w, http.StatusInternalServerError, "api_error", "the shipped traces do not load: "+err.Error())
		return
	}
	b, _ := json.Marshal(h.shipped.list)
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// trace serves GET /ui/api/traces/{name}: only a name among the embedded
// files, looked up in a map, never a path.
func (h *Handler) trace(w http.ResponseWriter, r *http.Request) {
	if err := h.shipped.load(); err != nil {
		writeError(w, http.StatusInternalServerError, "api_error", "the shipped traces do not load: "+err.Error())
		return
	}
	name := r.PathValue("name")
	b, ok := h.shipped.files[name]
	if !ok {
		names := make([]string, 0, len(h.shipped.files))
		for n := range h.shipped.files {
			names = append(names, n)
		}
		sort.Strings(names)
		writeError(w, http.StatusNotFound, "not_found_error", fmt.Sprintf("no shipped trace named %q; the traces are %s (GET /ui/api/traces lists them)",
			trimName(name), strings.Join(names, ", ")))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// trimName keeps an error message's echo of a client's name short.
func trimName(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
