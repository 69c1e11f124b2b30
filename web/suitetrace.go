package web

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
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
	Slots      int      `json:"slots,omitempty"`
	OverloadAt int      `json:"overload_at,omitempty"`
	Spikes     []Spike  `json:"spikes,omitempty"`
	Tenants    []string `json:"tenants,omitempty"`
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

// Spike is one of the upstream's slow periods, shaded on the charts: from
// and to in seconds since the run's start, its latency multiplier.
type Spike struct {
	FromS  float64 `json:"from_s"`
	ToS    float64 `json:"to_s"`
	Factor float64 `json:"factor"`
}

// TraceAlone is a scenario's companion run, by its figures.
type TraceAlone struct {
	Name    string            `json:"name"`
	Tenant  string            `json:"tenant"`
	Figures []json.RawMessage `json:"figures"` // each mode's, as report.json has them
}

// TraceLane is one mode's run: each request's life, the sampled gauges,
// and the mode's figures as report.json has them.
type TraceLane struct {
	Mode     string `json:"mode"`
	Windowed bool   `json:"windowed,omitempty"`
	Cap      int    `json:"cap,omitempty"`
	// Req has one row per request, in request id order, of ReqCols.
	Req     [][]float64     `json:"req"`
	Series  TraceSeries     `json:"series"`
	Figures json.RawMessage `json:"figures"` // as report.json has them; the page reads them as they are
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
	ColID = iota
	ColArrive
	ColSlot
	ColFirst
	ColDone
	ColOutcome
	ColStatus
	ColRetries
	ColStream
	ColCache
	ColTenant
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

// TraceBudget is the most a shipped trace may weigh.
const TraceBudget = 300 << 10

// DefaultScenario is the trace the page shows first: overload, where the
// upstream is offered about three times what it serves and refuses the
// excess with 529s. It is the seed's promise in one picture: sent
// blindly, most calls are refused and retried into more refusals; through
// the window and the cap the upstream stays within its slots and most
// requests are served.
const DefaultScenario = "overload"

// PageBurst is the name of the page's own burst trace
// (trace-default.json, benchtrace.Run of DefaultParams) among the shipped ones.
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
	// The figures it reads, of report.json's.
	type figures struct {
		Offered       int   `json:"offered"`
		Succeeded     int   `json:"succeeded"`
		UpstreamCalls int64 `json:"upstream_calls"`
		Upstream529   int64 `json:"upstream_529"`
	}
	var plain, win *figures
	for _, l := range tr.Lanes {
		var f figures
		if json.Unmarshal(l.Figures, &f) != nil {
			return ""
		}
		switch l.Mode {
		case "plain":
			plain = &f
		case "windowed":
			win = &f
		}
	}
	if plain == nil || win == nil {
		return ""
	}
	share := func(m *figures) string {
		return strconv.Itoa(int(math.Round(100*float64(m.Succeeded)/float64(max(m.Offered, 1))))) + " %"
	}
	per := func(m *figures) string {
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
