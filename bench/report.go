package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/sim"
)

// Report is what a run measured, written as report.json.
type Report struct {
	Scenario string        `json:"scenario"`
	Desc     string        `json:"description"`
	Seed     int64         `json:"seed"`
	Sluice   SluiceSummary `json:"sluice"`
	Client   ClientSummary `json:"client"`
	Arrivals int           `json:"arrivals"`
	// Spikes are the upstream's slow periods, shaded on the time charts.
	Spikes []SpikeSummary `json:"spikes,omitempty"`
	// Version is the sluice build that ran, from its build info.
	Version   string       `json:"sluice_version"`
	Modes     []ModeReport `json:"modes"`
	StartedAt time.Time    `json:"started_at"`
	// Repeats, when the modes ran more than once (Options.Repeat), are
	// every run's figures; the first is also Modes, and the trace, series
	// and plots are the first run's.
	Repeats []RunReport `json:"repeats,omitempty"`
	// Summary, after repeats, is each mode's main figures over the runs,
	// by mode then figure: what the table prints, for a script to read.
	Summary map[string]map[string]Spread `json:"summary,omitempty"`

	results []*ModeResult
}

// Spread is a figure's median, min and max over repeated runs.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// summaryFigures are the figures Summary spreads, under report.json's
// names for them.
var summaryFigures = []struct {
	name string
	get  func(m *ModeReport) float64
}{
	{"succeeded", func(m *ModeReport) float64 { return float64(m.Succeeded) }},
	{"failed", func(m *ModeReport) float64 { return float64(m.Failed) }},
	{"lost", func(m *ModeReport) float64 { return float64(m.Lost) }},
	{"goodput_rps", func(m *ModeReport) float64 { return m.GoodputRPS }},
	{"span_s", func(m *ModeReport) float64 { return m.SpanS }},
	{"latency_p50_ms", func(m *ModeReport) float64 { return m.LatencyMS.P50 }},
	{"latency_p90_ms", func(m *ModeReport) float64 { return m.LatencyMS.P90 }},
	{"latency_p99_ms", func(m *ModeReport) float64 { return m.LatencyMS.P99 }},
	{"ttft_p50_ms", func(m *ModeReport) float64 { return m.TTFTMS.P50 }},
	{"ttft_p99_ms", func(m *ModeReport) float64 { return m.TTFTMS.P99 }},
	{"peak_upstream_inflight", func(m *ModeReport) float64 { return float64(m.PeakUpstreamInflight) }},
	{"mean_upstream_inflight", func(m *ModeReport) float64 { return m.MeanUpstreamInflight }},
	{"peak_queued", func(m *ModeReport) float64 { return float64(m.PeakQueued) }},
	{"upstream_calls", func(m *ModeReport) float64 { return float64(m.UpstreamCalls) }},
	{"retries", func(m *ModeReport) float64 { return float64(m.Retries) }},
	{"cost_usd", func(m *ModeReport) float64 { return m.CostUSD }},
}

// summarize fills Summary from Repeats.
func (r *Report) summarize() {
	if len(r.Repeats) < 2 {
		return
	}
	r.Summary = map[string]map[string]Spread{}
	for _, m := range r.Modes {
		runs := r.runsOf(m.Mode)
		figs := map[string]Spread{}
		for _, f := range summaryFigures {
			med, lo, hi := spreadOf(runs, f.get)
			figs[f.name] = Spread{Median: med, Min: lo, Max: hi}
		}
		r.Summary[m.Mode] = figs
	}
}

// RunReport is one repeat's figures.
type RunReport struct {
	Seed     int64        `json:"seed"`
	Arrivals int          `json:"arrivals"`
	Modes    []ModeReport `json:"modes"`
}

// runs are the figures of every run, one Report each (just the first
// when the modes ran once).
func (r *Report) runs() []*Report {
	if len(r.Repeats) == 0 {
		return []*Report{r}
	}
	out := make([]*Report, len(r.Repeats))
	for i, rr := range r.Repeats {
		out[i] = &Report{Scenario: r.Scenario, Seed: rr.Seed, Arrivals: rr.Arrivals, Modes: rr.Modes}
	}
	return out
}

// runsOf is the named mode's figures in every run.
func (r *Report) runsOf(mode string) []ModeReport {
	var out []ModeReport
	for _, run := range r.runs() {
		if m := run.Mode(mode); m != nil {
			out = append(out, *m)
		}
	}
	return out
}

// SluiceSummary is the windowed mode's settings.
type SluiceSummary struct {
	MaxSize        int     `json:"max_size"`
	MaxWaitMS      float64 `json:"max_wait_ms"`
	MaxConcurrency int     `json:"max_concurrency"`
	TimeoutS       float64 `json:"timeout_s"`
}

// SpikeSummary is one period in which the upstream ran Factor times slower.
type SpikeSummary struct {
	FromS  float64 `json:"from_s"`
	ToS    float64 `json:"to_s"`
	Factor float64 `json:"factor"`
}

// buildVersion names the build from the info the Go toolchain embeds: the
// module version, and the VCS revision when built in a checkout.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		v += " " + rev[:min(12, len(rev))]
		if dirty {
			v += "+dirty"
		}
	}
	return v
}

// ClientSummary is the client's settings.
type ClientSummary struct {
	TimeoutS   float64 `json:"timeout_s"`
	MaxRetries int     `json:"max_retries"`
}

// ModeReport is one mode's figures.
type ModeReport struct {
	Mode string `json:"mode"`
	// Offered is the requests the workload offered (Sent, but for those an
	// interrupted run never sent).
	Offered   int            `json:"offered"`
	Sent      int            `json:"sent"`
	Succeeded int            `json:"succeeded"`
	Failed    int            `json:"failed"`
	Lost      int            `json:"lost"`
	Errors    map[string]int `json:"errors"`
	Retries   int            `json:"retries"`
	// SpanS is from the first arrival to the last request's end.
	SpanS      float64 `json:"span_s"`
	GoodputRPS float64 `json:"goodput_rps"`
	// LatencyMS is arrival to end (retries included) of the successes;
	// LatencyAllMS of every request however it ended.
	LatencyMS    Percentiles `json:"latency_ms"`
	LatencyAllMS Percentiles `json:"latency_all_ms"`
	// TTFTMS is arrival to first content_block_delta of successful streams.
	TTFTMS Percentiles `json:"ttft_ms"`
	// TTFTReadMS and TTFTWriteMS split TTFTMS by whether the stream read
	// the prompt cache (a follower, or a warm prefix; it may also have
	// written its own later part) or only wrote it (a leader, or anyone on
	// a cold prefix); requests doing neither are in neither.
	TTFTWriteMS Percentiles `json:"ttft_cache_write_ms"`
	TTFTReadMS  Percentiles `json:"ttft_cache_read_ms"`
	// PeakUpstreamInflight is the simulator's own exact peak of requests
	// in generation; PeakUpstreamSampled the peak of the 10 ms samples;
	// PeakGateInflight the peak of sluice's gate slots held (sampled).
	PeakUpstreamInflight int              `json:"peak_upstream_inflight"`
	PeakUpstreamSampled  int              `json:"peak_upstream_inflight_sampled"`
	PeakGateInflight     int              `json:"peak_gate_inflight"`
	MeanUpstreamInflight float64          `json:"mean_upstream_inflight"`
	PeakQueued           int              `json:"peak_queued"`
	Upstream429          int64            `json:"upstream_429"`
	Upstream529          int64            `json:"upstream_529"`
	UpstreamByStatus     map[string]int64 `json:"upstream_by_status"`
	UpstreamCalls        int64            `json:"upstream_calls"`
	Tokens               sim.TokenStats   `json:"tokens"`
	CostUSD              float64          `json:"cost_usd"`
	InputCostUSD         float64          `json:"input_cost_usd"`
	// CostVsPlain is CostUSD over plain's, when plain ran and cost
	// anything: bulk's is the Batches API's half price.
	CostVsPlain float64 `json:"cost_vs_plain,omitempty"`
	// Cap is BATCH_MAX_CONCURRENCY for the windowed mode, else 0.
	Cap int `json:"cap,omitempty"`
	// Windowed says the mode went through sluice's window and gate
	// (windowed, or a scenario's variant).
	Windowed bool `json:"windowed,omitempty"`
	// Phases, when the upstream's capacity changed during the run
	// (sim.capacity_steps), are the figures of each stretch between the
	// changes.
	Phases     []PhaseReport `json:"phases,omitempty"`
	Little     *Little       `json:"little,omitempty"`
	Saturation *Saturation   `json:"saturation,omitempty"`
	// Tenants are the figures of each tenant of a tenants workload, in
	// the order the scenario names them.
	Tenants []TenantReport `json:"tenants,omitempty"`
}

// TenantReport is one tenant's figures in one mode: its goodput over its
// own span (its first arrival to its last request's end) and the latency
// of its successes.
type TenantReport struct {
	Tenant     string      `json:"tenant"`
	Sent       int         `json:"sent"`
	Succeeded  int         `json:"succeeded"`
	GoodputRPS float64     `json:"goodput_rps"`
	LatencyMS  Percentiles `json:"latency_ms"`
}

// tenantNames indexes the tenants of the report's modes (none without
// modes).
func (r *Report) tenantNames() []TenantReport {
	if len(r.Modes) == 0 {
		return nil
	}
	return r.Modes[0].Tenants
}

// tenantReports are the figures of each tenant in recs, in the order of
// names.
func tenantReports(recs []Record, names []string) []TenantReport {
	var out []TenantReport
	for _, name := range names {
		tr := TenantReport{Tenant: name}
		var lat []float64
		first, last := -1.0, 0.0
		for _, rec := range recs {
			if rec.Tenant != name || rec.ErrorType == "not_sent" {
				continue
			}
			tr.Sent++
			if first < 0 || rec.ArrivalMS < first {
				first = rec.ArrivalMS
			}
			last = max(last, rec.DoneMS)
			if rec.Outcome == "ok" {
				tr.Succeeded++
				lat = append(lat, rec.DoneMS-rec.ArrivalMS)
			}
		}
		tr.GoodputRPS = goodput(tr.Succeeded, time.Duration((last-max(first, 0))*float64(time.Millisecond)))
		tr.LatencyMS = summarise(lat)
		out = append(out, tr)
	}
	return out
}

// PhaseReport is one stretch of a run with the same upstream capacity.
type PhaseReport struct {
	FromS      float64 `json:"from_s"`
	ToS        float64 `json:"to_s"` // the last phase's is the last arrival
	Capacity   int     `json:"capacity"`
	OverloadAt int     `json:"overload_at"`
	// Arrived, Succeeded and Failed count the requests that arrived in the
	// phase, and LatencyMS times the successes among them.
	Arrived   int         `json:"arrived"`
	Succeeded int         `json:"succeeded"`
	Failed    int         `json:"failed"`
	LatencyMS Percentiles `json:"latency_ms"`
	// GoodputRPS is the successes that ended in the phase, per second:
	// what the upstream delivered while it had this capacity, whenever
	// the requests arrived.
	GoodputRPS float64 `json:"goodput_rps"`
	// MeanLimit is the gate's mean limit in the phase (windowed modes).
	MeanLimit float64 `json:"mean_limit,omitempty"`
}

// phase is where a phase starts, and the upstream's capacity in it.
type phase struct {
	from                 time.Duration
	capacity, overloadAt int
}

// phases are the scenario's stretches of one capacity, or nil when it
// never changes.
func (sc *Scenario) phases() []phase {
	if len(sc.Sim.CapacitySteps) == 0 {
		return nil
	}
	var out []phase
	if sc.Sim.CapacitySteps[0].From > 0 {
		out = append(out, phase{0, sc.Sim.Capacity, sc.Sim.OverloadAt})
	}
	for _, st := range sc.Sim.CapacitySteps {
		out = append(out, phase{st.From.D(), st.Capacity, st.OverloadAt})
	}
	return out
}

// phaseReports are res's figures in each phase.
func phaseReports(res *ModeResult, phases []phase) []PhaseReport {
	if len(phases) == 0 {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	// The last phase ends with the last arrival: past it nothing is
	// offered, and a mode's tail of late answers would dilute its goodput.
	end := 0.0
	for _, rec := range res.Records {
		end = max(end, rec.ArrivalMS)
	}
	out := make([]PhaseReport, len(phases))
	for i, ph := range phases {
		from, to := ms(ph.from), end
		if i+1 < len(phases) {
			to = ms(phases[i+1].from)
		}
		pr := PhaseReport{FromS: from / 1000, ToS: to / 1000, Capacity: ph.capacity, OverloadAt: ph.overloadAt}
		var lat []float64
		ended := 0
		for _, rec := range res.Records {
			if rec.ErrorType == "not_sent" {
				continue
			}
			if rec.Outcome == "ok" && rec.DoneMS >= from && rec.DoneMS < to {
				ended++
			}
			if rec.ArrivalMS < from || rec.ArrivalMS >= to {
				continue
			}
			pr.Arrived++
			if rec.Outcome == "ok" {
				pr.Succeeded++
				lat = append(lat, rec.DoneMS-rec.ArrivalMS)
			} else {
				pr.Failed++
			}
		}
		if to > from {
			pr.GoodputRPS = float64(ended) / ((to - from) / 1000)
		}
		pr.LatencyMS = summarise(lat)
		if res.Windowed {
			sum, n := 0.0, 0
			for _, smp := range res.Samples {
				if t := ms(smp.T); t >= from && t < to {
					sum += float64(smp.GateCapacity)
					n++
				}
			}
			if n > 0 {
				pr.MeanLimit = sum / float64(n)
			}
		}
		out[i] = pr
	}
	return out
}

func newReport(sc *Scenario, results []*ModeResult) *Report {
	cfg := sc.SluiceConfig(true)
	r := &Report{Scenario: sc.Name, Desc: sc.Description, Seed: sc.Seed, StartedAt: time.Now().UTC(),
		Sluice: SluiceSummary{MaxSize: cfg.MaxSize, MaxWaitMS: float64(cfg.MaxWait) / 1e6,
			MaxConcurrency: cfg.MaxConcurrency, TimeoutS: cfg.Timeout.Seconds()},
		Client:  ClientSummary{TimeoutS: sc.ClientTimeout().Seconds(), MaxRetries: sc.MaxRetries()},
		Version: buildVersion(), results: results}
	for _, sp := range sc.Sim.Spikes {
		r.Spikes = append(r.Spikes, SpikeSummary{FromS: sp.From.D().Seconds(), ToS: sp.To.D().Seconds(), Factor: sp.Factor})
	}
	var tenants []string
	for _, tw := range sc.Workload.Tenants {
		tenants = append(tenants, tw.Name)
	}
	for _, res := range results {
		r.Arrivals = len(res.Records)
		m := modeReport(res)
		m.Tenants = tenantReports(res.Records, tenants)
		m.Phases = phaseReports(res, sc.phases())
		r.Modes = append(r.Modes, m)
	}
	if p := r.Mode(ModePlain); p != nil && p.CostUSD > 0 {
		for i := range r.Modes {
			r.Modes[i].CostVsPlain = r.Modes[i].CostUSD / p.CostUSD
		}
	}
	return r
}

func modeReport(res *ModeResult) ModeReport {
	m := ModeReport{Mode: res.Mode, Errors: map[string]int{}, Cap: res.Cap, Windowed: res.Windowed,
		UpstreamByStatus: res.Sim.ByStatus, Tokens: res.Sim.Tokens, CostUSD: res.Sim.CostUSD, InputCostUSD: res.Sim.InputCostUSD,
		PeakUpstreamInflight: int(res.Sim.PeakInflight), Upstream429: res.Sim.ByStatus["429"],
		Upstream529: res.Sim.ByStatus["529"], UpstreamCalls: res.Sim.Requests}
	m.Offered = len(res.Records)
	var lat, all, ttft, ttftWrite, ttftRead []float64
	first, last := -1.0, 0.0
	for _, rec := range res.Records {
		if rec.ErrorType == "not_sent" {
			continue
		}
		m.Sent++
		m.Retries += rec.Retries
		if first < 0 || rec.ArrivalMS < first {
			first = rec.ArrivalMS
		}
		last = max(last, rec.DoneMS)
		d := rec.DoneMS - rec.ArrivalMS
		all = append(all, d)
		switch rec.Outcome {
		case "ok":
			m.Succeeded++
			lat = append(lat, d)
			if rec.FirstTokenMS != nil {
				d := *rec.FirstTokenMS - rec.ArrivalMS
				ttft = append(ttft, d)
				switch {
				case rec.CacheRead > 0:
					ttftRead = append(ttftRead, d)
				case rec.CacheWrite > 0:
					ttftWrite = append(ttftWrite, d)
				}
			}
		case "lost":
			m.Lost++
			m.Errors["lost:"+rec.ErrorType]++
		default:
			m.Failed++
			m.Errors[rec.ErrorType]++
		}
	}
	span := time.Duration((last - max(first, 0)) * float64(time.Millisecond))
	m.SpanS = span.Seconds()
	m.GoodputRPS = goodput(m.Succeeded, span)
	m.LatencyMS, m.LatencyAllMS, m.TTFTMS = summarise(lat), summarise(all), summarise(ttft)
	m.TTFTWriteMS, m.TTFTReadMS = summarise(ttftWrite), summarise(ttftRead)
	sum := 0.0
	for _, s := range res.Samples {
		m.PeakQueued = max(m.PeakQueued, s.Queued)
		m.PeakUpstreamSampled = max(m.PeakUpstreamSampled, s.UpstreamInflight)
		m.PeakGateInflight = max(m.PeakGateInflight, s.GateInflight)
		sum += float64(s.UpstreamInflight)
	}
	if len(res.Samples) > 0 {
		m.MeanUpstreamInflight = sum / float64(len(res.Samples))
	}
	if len(res.Upstream) > 0 && span > 0 {
		from := time.Duration(first*float64(time.Millisecond)) + span/10
		m.Little = littleOver(res.Samples, res.Upstream, from, from+span*8/10)
		m.Saturation = saturation(res.Samples, res.Upstream, res.Cap)
	}
	return m
}

// Mode returns the report of the named mode, or nil.
func (r *Report) Mode(name string) *ModeReport {
	for i := range r.Modes {
		if r.Modes[i].Mode == name {
			return &r.Modes[i]
		}
	}
	return nil
}

// Results are the raw records behind the report.
func (r *Report) Results() []*ModeResult { return r.results }

// WriteFiles writes report.json, trace.jsonl, series.json and the plots
// into dir, creating it if needed.
func (r *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := r.writeTrace(filepath.Join(dir, "trace.jsonl")); err != nil {
		return err
	}
	if err := r.writeSeries(filepath.Join(dir, "series.json")); err != nil {
		return err
	}
	return r.WritePlots(dir)
}

func (r *Report) writeTrace(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, res := range r.results {
		for _, rec := range res.Records {
			if err := enc.Encode(rec); err != nil {
				f.Close()
				return err
			}
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// seriesJSON is the sampled gauges of each mode, for a page to replay.
type seriesJSON struct {
	Mode             string    `json:"mode"`
	Cap              int       `json:"cap,omitempty"`
	TMS              []float64 `json:"t_ms"`
	UpstreamInflight []int     `json:"upstream_inflight"`
	Queued           []int     `json:"queued"`
	GateInflight     []int     `json:"gate_inflight"`
	Outstanding      []int     `json:"outstanding"`
	// InputBucketSize and InputBucket are the simulator's input-token
	// bucket, its size and its level at each sample, when it has one.
	InputBucketSize int       `json:"input_bucket_size,omitempty"`
	InputBucket     []float64 `json:"input_bucket,omitempty"`
}

func (r *Report) writeSeries(path string) error {
	var out []seriesJSON
	for _, res := range r.results {
		s := seriesJSON{Mode: res.Mode, Cap: res.Cap, InputBucketSize: res.InputBucketSize}
		for _, x := range res.Samples {
			if res.InputBucketSize > 0 {
				s.InputBucket = append(s.InputBucket, math.Round(x.InputBucket))
			}
			s.TMS = append(s.TMS, float64(x.T.Microseconds())/1000)
			s.UpstreamInflight = append(s.UpstreamInflight, x.UpstreamInflight)
			s.Queued = append(s.Queued, x.Queued)
			s.GateInflight = append(s.GateInflight, x.GateInflight)
			s.Outstanding = append(s.Outstanding, x.Outstanding)
		}
		out = append(out, s)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// A tableRow is one line of the terminal table: a figure read from each
// mode (vals, several numbers for a cell such as "in/out") and how to show
// it. A row is there because it says something the others do not; when it
// could only repeat another row for this run, hide says so and it is left
// out (the figure stays in report.json).
type tableRow struct {
	name string
	vals func(m *ModeReport) []float64
	show func(v []float64) string
	// only, if set, names the modes the figure exists for; the others get
	// "-" rather than a zero that reads like a measurement.
	only func(m *ModeReport) bool
	hide func(r *Report) bool
}

func one(f func(m *ModeReport) float64) func(m *ModeReport) []float64 {
	return func(m *ModeReport) []float64 { return []float64{f(m)} }
}

func showInt(v []float64) string { return fmt.Sprintf("%.0f", v[0]) }
func showMS(v []float64) string  { return fmt.Sprintf("%.0f ms", v[0]) }

func throughSluice(m *ModeReport) bool { return m.Mode != ModeDirect }
func windowed(m *ModeReport) bool      { return m.Windowed || m.Mode == ModeWindowed }

// tableRows are the table's rows, in order. What each means:
//
//   - sent, succeeded, failed, lost: requests the client sent, and how
//     each ended (lost: no reply at all, e.g. the run was interrupted).
//   - served (of offered): the successes over the requests the workload
//     offered, what goodput per second hides when the upstream caps both
//     paths' rate.
//   - goodput: successes per second over the span, first arrival to last
//     end; span says how long the mode took to serve the workload.
//   - latency p50/p90/p99: arrival to end of the successful requests,
//     client retries included. The max is shown only when it differs from
//     the p99 (with fewer than 100 successes the nearest-rank p99 is the
//     max); the p99 of every request however it ended only when some did
//     not succeed (otherwise it is the same set).
//   - stream TTFT p50/p99: arrival to the first content_block_delta of
//     successful streams; shown when the workload streams.
//   - peak upstream in-flight: the simulator's own exact peak of requests
//     in generation, the figure the cap exists to bound. Its 10 ms sampled
//     peak is only in report.json: it can only equal or undercut this one.
//   - peak gate slots held: sluice's gate, windowed only; shown when it
//     differs from the upstream peak (an upstream shared with other
//     clients, or a call holding its slot after the upstream finished).
//   - mean upstream in-flight: how busy the upstream was on average.
//   - peak queued in sluice: windowed requests waiting for a window or a
//     slot (always 0 on the plain path, which does not queue).
//   - upstream calls, client retries, upstream 429 / 529: what reached the
//     upstream, how often the client tried again, and the upstream's
//     refusals; upstream calls per success is the work the upstream did
//     for each answer that reached a client ("-" when none did).
//   - tokens, cache write/read, cost: the simulator's counts and their
//     price at list rates (batch items at half); cache rows only when a
//     mode used the cache.
//   - cost vs plain: each mode's cost over plain's, when bulk ran.
//   - errors: failures by type.
var tableRows = []tableRow{
	{name: "sent", vals: one(func(m *ModeReport) float64 { return float64(m.Sent) }), show: showInt},
	{name: "succeeded", vals: one(func(m *ModeReport) float64 { return float64(m.Succeeded) }), show: showInt},
	{name: "failed", vals: one(func(m *ModeReport) float64 { return float64(m.Failed) }), show: showInt},
	{name: "lost", vals: one(func(m *ModeReport) float64 { return float64(m.Lost) }), show: showInt},
	{name: "served (of offered)", vals: one(servedShare), show: func(v []float64) string { return fmt.Sprintf("%.0f%%", 100*v[0]) }},
	{name: "goodput", vals: one(func(m *ModeReport) float64 { return m.GoodputRPS }),
		show: func(v []float64) string { return fmt.Sprintf("%.2f /s", v[0]) }},
	{name: "span", vals: one(func(m *ModeReport) float64 { return m.SpanS }),
		show: func(v []float64) string { return fmt.Sprintf("%.1f s", v[0]) }},
	{name: "latency p50", vals: one(func(m *ModeReport) float64 { return m.LatencyMS.P50 }), show: showMS},
	{name: "latency p90", vals: one(func(m *ModeReport) float64 { return m.LatencyMS.P90 }), show: showMS},
	{name: "latency p99", vals: one(func(m *ModeReport) float64 { return m.LatencyMS.P99 }), show: showMS},
	{name: "latency max", vals: one(func(m *ModeReport) float64 { return m.LatencyMS.Max }), show: showMS,
		hide: func(r *Report) bool {
			return r.allModes(func(m *ModeReport) bool { return m.LatencyMS.Max == m.LatencyMS.P99 })
		}},
	{name: "all-requests p99", vals: one(func(m *ModeReport) float64 { return m.LatencyAllMS.P99 }), show: showMS,
		hide: func(r *Report) bool { return r.allModes(func(m *ModeReport) bool { return m.Failed+m.Lost == 0 }) }},
	{name: "stream TTFT p50", vals: one(func(m *ModeReport) float64 { return m.TTFTMS.P50 }), show: showMS,
		hide: func(r *Report) bool { return r.allModes(func(m *ModeReport) bool { return m.TTFTMS.N == 0 }) }},
	{name: "stream TTFT p99", vals: one(func(m *ModeReport) float64 { return m.TTFTMS.P99 }), show: showMS,
		hide: func(r *Report) bool { return r.allModes(func(m *ModeReport) bool { return m.TTFTMS.N == 0 }) }},
	{name: "streams writing cache", vals: one(func(m *ModeReport) float64 { return float64(m.TTFTWriteMS.N) }), show: showInt,
		hide: noCache},
	{name: "  their TTFT p50 / p99", vals: func(m *ModeReport) []float64 { return []float64{m.TTFTWriteMS.P50, m.TTFTWriteMS.P99} },
		show: func(v []float64) string { return fmt.Sprintf("%.0f / %.0f ms", v[0], v[1]) }, hide: noCache},
	{name: "streams reading cache", vals: one(func(m *ModeReport) float64 { return float64(m.TTFTReadMS.N) }), show: showInt,
		hide: noCache},
	{name: "  their TTFT p50 / p99", vals: func(m *ModeReport) []float64 { return []float64{m.TTFTReadMS.P50, m.TTFTReadMS.P99} },
		show: func(v []float64) string { return fmt.Sprintf("%.0f / %.0f ms", v[0], v[1]) }, hide: noCache},
	{name: "peak upstream in-flight", vals: one(func(m *ModeReport) float64 { return float64(m.PeakUpstreamInflight) }), show: showInt},
	{name: "peak gate slots held", vals: one(func(m *ModeReport) float64 { return float64(m.PeakGateInflight) }), show: showInt,
		only: windowed, hide: func(r *Report) bool {
			return r.allModes(func(m *ModeReport) bool { return !windowed(m) || m.PeakGateInflight == m.PeakUpstreamInflight })
		}},
	{name: "mean upstream in-flight", vals: one(func(m *ModeReport) float64 { return m.MeanUpstreamInflight }),
		show: func(v []float64) string { return fmt.Sprintf("%.1f", v[0]) }},
	{name: "peak queued in sluice", vals: one(func(m *ModeReport) float64 { return float64(m.PeakQueued) }), show: showInt,
		only: throughSluice},
	{name: "upstream calls", vals: one(func(m *ModeReport) float64 { return float64(m.UpstreamCalls) }), show: showInt},
	{name: "upstream calls per success", vals: one(callsPerSuccess), show: func(v []float64) string {
		if v[0] < 0 {
			return "-" // none succeeded
		}
		return fmt.Sprintf("%.2f", v[0])
	}},
	{name: "client retries", vals: one(func(m *ModeReport) float64 { return float64(m.Retries) }), show: showInt},
	{name: "upstream 429 / 529", vals: func(m *ModeReport) []float64 { return []float64{float64(m.Upstream429), float64(m.Upstream529)} },
		show: func(v []float64) string { return fmt.Sprintf("%.0f / %.0f", v[0], v[1]) }},
	{name: "tokens in / out", vals: func(m *ModeReport) []float64 { return []float64{float64(m.Tokens.Input), float64(m.Tokens.Output)} },
		show: func(v []float64) string { return fmt.Sprintf("%.0f / %.0f", v[0], v[1]) }},
	{name: "cache write / read", vals: func(m *ModeReport) []float64 {
		return []float64{float64(m.Tokens.CacheCreation), float64(m.Tokens.CacheRead)}
	}, show: func(v []float64) string { return fmt.Sprintf("%.0f / %.0f", v[0], v[1]) }, hide: noCache},
	// One row: the input part is what the cache-aware releaser changes, and
	// a second row of dollars read as a second total.
	{name: "cost (input part)", vals: func(m *ModeReport) []float64 { return []float64{m.CostUSD, m.InputCostUSD} },
		show: func(v []float64) string { return fmt.Sprintf("$%.4f ($%.4f)", v[0], v[1]) }},
	// Shown when a mode's cost differs from plain's: bulk's half price.
	{name: "cost vs plain", vals: one(func(m *ModeReport) float64 { return m.CostVsPlain }),
		show: func(v []float64) string { return fmt.Sprintf("%.2fx", v[0]) },
		only: func(m *ModeReport) bool { return m.CostVsPlain > 0 },
		hide: func(r *Report) bool { return r.Mode(ModeBulk) == nil }},
}

// servedShare is the share of the offered requests that succeeded.
func servedShare(m *ModeReport) float64 {
	if m.Offered == 0 {
		return 0
	}
	return float64(m.Succeeded) / float64(m.Offered)
}

// callsPerSuccess is the upstream work per success: every call, retries
// and refused ones included, over the successes; -1 if none succeeded.
func callsPerSuccess(m *ModeReport) float64 {
	if m.Succeeded == 0 {
		return -1
	}
	return float64(m.UpstreamCalls) / float64(m.Succeeded)
}

func noCache(r *Report) bool { return !r.anyCache() }

// allModes reports whether f holds for every mode.
func (r *Report) allModes(f func(m *ModeReport) bool) bool {
	for i := range r.Modes {
		if !f(&r.Modes[i]) {
			return false
		}
	}
	return true
}

// WriteTable prints the modes side by side, then the verdict line. After
// repeated runs each cell is the median of the runs and, when they
// differ, their range: [min .. max].
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintln(w, r.Heading())
	runs := r.runs()
	if len(runs) > 1 {
		fmt.Fprintf(w, "%d runs, seeds %d to %d: each figure is the median [min .. max] of the runs\n",
			len(runs), runs[0].Seed, runs[len(runs)-1].Seed)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, line := range r.TableLines() {
		fmt.Fprintln(tw, strings.Join(line, "\t")+"\t")
	}
	tw.Flush()
	if len(runs) > 1 {
		fmt.Fprintln(w, "errors are summed over the runs")
	}
	if v := r.Verdict(); v != "" {
		fmt.Fprintln(w, v)
	}
}

// Heading is the table's first line: the scenario and its settings.
func (r *Report) Heading() string {
	return fmt.Sprintf("scenario %s: %d arrivals; windowed: window %d or %gms, %d slots, deadline %gs; client timeout %gs, %d retries",
		r.Scenario, r.Arrivals, r.Sluice.MaxSize, r.Sluice.MaxWaitMS, r.Sluice.MaxConcurrency, r.Sluice.TimeoutS,
		r.Client.TimeoutS, r.Client.MaxRetries)
}

// TableLines are the table's cells, line by line: first the modes (after
// an empty corner), then one line per row, its name and a cell per mode;
// a phase's heading is a line of its name alone.
func (r *Report) TableLines() [][]string {
	runs := r.runs()
	head := []string{""}
	for _, m := range r.Modes {
		head = append(head, m.Mode)
	}
	out := [][]string{head}
	for _, row := range tableRows {
		// Hidden only if it would repeat another row in every run.
		if row.hide != nil && allRuns(runs, row.hide) {
			continue
		}
		line := []string{row.name}
		for i := range r.Modes {
			cell := "-"
			if row.only == nil || row.only(&r.Modes[i]) {
				cell = spreadCell(row, r.runsOf(r.Modes[i].Mode))
			}
			line = append(line, cell)
		}
		out = append(out, line)
	}
	for i := range r.tenantNames() {
		tr := r.Modes[0].Tenants[i]
		for _, row := range []struct {
			name string
			val  func(t TenantReport) float64
			show func([]float64) string
		}{
			{"goodput", func(t TenantReport) float64 { return t.GoodputRPS }, func(v []float64) string { return fmt.Sprintf("%.2f/s", v[0]) }},
			{"latency p50", func(t TenantReport) float64 { return t.LatencyMS.P50 }, showMS},
			{"latency p99", func(t TenantReport) float64 { return t.LatencyMS.P99 }, showMS},
		} {
			cells := tableRow{name: "tenant " + tr.Tenant + " " + row.name, show: row.show,
				vals: func(m *ModeReport) []float64 {
					if i >= len(m.Tenants) {
						return []float64{0}
					}
					return []float64{row.val(m.Tenants[i])}
				}}
			line := []string{cells.name}
			for j := range r.Modes {
				line = append(line, spreadCell(cells, r.runsOf(r.Modes[j].Mode)))
			}
			out = append(out, line)
		}
	}
	line := []string{"errors"}
	for _, m := range r.Modes {
		all := map[string]int{}
		for _, run := range r.runsOf(m.Mode) {
			for k, v := range run.Errors {
				all[k] += v
			}
		}
		line = append(line, errorList(all))
	}
	out = append(out, line)
	return append(out, r.phaseLines()...)
}

func allRuns(runs []*Report, f func(r *Report) bool) bool {
	for _, run := range runs {
		if !f(run) {
			return false
		}
	}
	return true
}

// spreadCell shows a row's figure over the runs of one mode: the value
// itself after one run, else the median and, unless every run agreed, the
// range.
func spreadCell(row tableRow, runs []ModeReport) string {
	if len(runs) == 0 {
		return "-"
	}
	var per [][]float64 // per[j]: the j-th value of the cell in every run
	for i := range runs {
		for j, v := range row.vals(&runs[i]) {
			if j == len(per) {
				per = append(per, nil)
			}
			per[j] = append(per[j], v)
		}
	}
	med, lo, hi := make([]float64, len(per)), make([]float64, len(per)), make([]float64, len(per))
	same := true
	for j, vs := range per {
		med[j], lo[j], hi[j] = spread(vs)
		same = same && lo[j] == hi[j]
	}
	if same {
		return row.show(med)
	}
	m, l, h := row.show(med), row.show(lo), row.show(hi)
	// The unit once, after the median: "2329 ms [2309 .. 2331]".
	if i := strings.LastIndexAny(m, "0123456789"); i >= 0 && strings.HasPrefix(m[i+1:], " ") {
		unit := m[i+1:]
		if strings.HasSuffix(l, unit) && strings.HasSuffix(h, unit) {
			l, h = strings.TrimSuffix(l, unit), strings.TrimSuffix(h, unit)
		}
	}
	return fmt.Sprintf("%s [%s .. %s]", m, l, h)
}

// spread is the median, min and max of vs (which it sorts); the median of
// an even count is the mean of the middle two.
func spread(vs []float64) (med, lo, hi float64) {
	if len(vs) == 0 {
		return 0, 0, 0
	}
	slices.Sort(vs)
	n := len(vs)
	med = vs[n/2]
	if n%2 == 0 {
		med = (vs[n/2-1] + vs[n/2]) / 2
	}
	return med, vs[0], vs[n-1]
}

// anyCache reports whether any mode wrote or read the prompt cache.
func (r *Report) anyCache() bool {
	for _, m := range r.Modes {
		if m.Tokens.CacheCreation > 0 || m.Tokens.CacheRead > 0 {
			return true
		}
	}
	return false
}

func errorList(errs map[string]int) string {
	if len(errs) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, errs[k])
	}
	return strings.Join(parts, " ")
}

// phaseLines are, when the upstream's capacity changed during the run,
// each phase's goodput, latency p99 and (windowed) mean limit, from the
// first run.
func (r *Report) phaseLines() [][]string {
	if len(r.Modes) == 0 || len(r.Modes[0].Phases) == 0 {
		return nil
	}
	var out [][]string
	for i, ph := range r.Modes[0].Phases {
		out = append(out, []string{fmt.Sprintf("phase %d (from %gs: %d slots, 529 at %d)", i+1, ph.FromS, ph.Capacity, ph.OverloadAt)})
		cells := []struct {
			name string
			get  func(p PhaseReport, m *ModeReport) string
		}{
			{"  goodput (ended in it)", func(p PhaseReport, _ *ModeReport) string { return fmt.Sprintf("%.2f /s", p.GoodputRPS) }},
			{"  latency p99 (arrived in it)", func(p PhaseReport, _ *ModeReport) string { return fmt.Sprintf("%.0f ms", p.LatencyMS.P99) }},
			{"  failed (arrived in it)", func(p PhaseReport, _ *ModeReport) string { return fmt.Sprintf("%d", p.Failed) }},
			{"  mean gate limit", func(p PhaseReport, m *ModeReport) string {
				if !m.Windowed {
					return "-"
				}
				return fmt.Sprintf("%.1f", p.MeanLimit)
			}},
		}
		for _, c := range cells {
			line := []string{c.name}
			for j := range r.Modes {
				cell := "-"
				if m := &r.Modes[j]; i < len(m.Phases) {
					cell = c.get(m.Phases[i], m)
				}
				line = append(line, cell)
			}
			out = append(out, line)
		}
	}
	return out
}
