package bench

import (
	"runtime/debug"
	"time"
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
		m.Budgets = budgetReports(res.Budgets, tenants, res.Records)
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

// spreadOf is the median, min and max of a figure over runs.
func spreadOf(runs []ModeReport, get func(m *ModeReport) float64) (med, lo, hi float64) {
	vs := make([]float64, len(runs))
	for i := range runs {
		vs[i] = get(&runs[i])
	}
	return spread(vs)
}
