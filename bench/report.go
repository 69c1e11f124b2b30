package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/sim"
)

// Report is what a run measured, written as report.json.
type Report struct {
	Scenario  string        `json:"scenario"`
	Desc      string        `json:"description"`
	Seed      int64         `json:"seed"`
	Sluice    SluiceSummary `json:"sluice"`
	Client    ClientSummary `json:"client"`
	Arrivals  int           `json:"arrivals"`
	Modes     []ModeReport  `json:"modes"`
	StartedAt time.Time     `json:"started_at"`

	results []*ModeResult
}

// SluiceSummary is the windowed mode's settings.
type SluiceSummary struct {
	MaxSize        int     `json:"max_size"`
	MaxWaitMS      float64 `json:"max_wait_ms"`
	MaxConcurrency int     `json:"max_concurrency"`
	TimeoutS       float64 `json:"timeout_s"`
}

// ClientSummary is the client's settings.
type ClientSummary struct {
	TimeoutS   float64 `json:"timeout_s"`
	MaxRetries int     `json:"max_retries"`
}

// ModeReport is one mode's figures.
type ModeReport struct {
	Mode      string         `json:"mode"`
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
	// Cap is BATCH_MAX_CONCURRENCY for the windowed mode, else 0.
	Cap        int         `json:"cap,omitempty"`
	Little     *Little     `json:"little,omitempty"`
	Saturation *Saturation `json:"saturation,omitempty"`
}

func newReport(sc *Scenario, results []*ModeResult) *Report {
	cfg := sc.SluiceConfig(true)
	r := &Report{Scenario: sc.Name, Desc: sc.Description, Seed: sc.Seed, StartedAt: time.Now().UTC(),
		Sluice: SluiceSummary{MaxSize: cfg.MaxSize, MaxWaitMS: float64(cfg.MaxWait) / 1e6,
			MaxConcurrency: cfg.MaxConcurrency, TimeoutS: cfg.Timeout.Seconds()},
		Client:  ClientSummary{TimeoutS: sc.ClientTimeout().Seconds(), MaxRetries: sc.MaxRetries()},
		results: results}
	for _, res := range results {
		r.Arrivals = len(res.Records)
		r.Modes = append(r.Modes, modeReport(res))
	}
	return r
}

func modeReport(res *ModeResult) ModeReport {
	m := ModeReport{Mode: res.Mode, Errors: map[string]int{}, Cap: res.Cap,
		UpstreamByStatus: res.Sim.ByStatus, Tokens: res.Sim.Tokens, CostUSD: res.Sim.CostUSD, InputCostUSD: res.Sim.InputCostUSD,
		PeakUpstreamInflight: int(res.Sim.PeakInflight), Upstream429: res.Sim.ByStatus["429"],
		Upstream529: res.Sim.ByStatus["529"], UpstreamCalls: res.Sim.Requests}
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
}

func (r *Report) writeSeries(path string) error {
	var out []seriesJSON
	for _, res := range r.results {
		s := seriesJSON{Mode: res.Mode, Cap: res.Cap}
		for _, x := range res.Samples {
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

// WriteTable prints the modes side by side.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "scenario %s: %d arrivals; windowed: window %d or %gms, %d slots, deadline %gs; client timeout %gs, %d retries\n",
		r.Scenario, r.Arrivals, r.Sluice.MaxSize, r.Sluice.MaxWaitMS, r.Sluice.MaxConcurrency, r.Sluice.TimeoutS,
		r.Client.TimeoutS, r.Client.MaxRetries)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(name string, f func(m *ModeReport) string) {
		fmt.Fprint(tw, name+"\t")
		for i := range r.Modes {
			fmt.Fprint(tw, f(&r.Modes[i])+"\t")
		}
		fmt.Fprintln(tw)
	}
	ms := func(v float64) string { return fmt.Sprintf("%.0f ms", v) }
	row("", func(m *ModeReport) string { return m.Mode })
	row("sent", func(m *ModeReport) string { return fmt.Sprint(m.Sent) })
	row("succeeded", func(m *ModeReport) string { return fmt.Sprint(m.Succeeded) })
	row("failed", func(m *ModeReport) string { return fmt.Sprint(m.Failed) })
	row("lost", func(m *ModeReport) string { return fmt.Sprint(m.Lost) })
	row("goodput", func(m *ModeReport) string { return fmt.Sprintf("%.2f /s", m.GoodputRPS) })
	row("span", func(m *ModeReport) string { return fmt.Sprintf("%.1f s", m.SpanS) })
	row("latency p50", func(m *ModeReport) string { return ms(m.LatencyMS.P50) })
	row("latency p90", func(m *ModeReport) string { return ms(m.LatencyMS.P90) })
	row("latency p99", func(m *ModeReport) string { return ms(m.LatencyMS.P99) })
	row("latency max", func(m *ModeReport) string { return ms(m.LatencyMS.Max) })
	row("all-requests p99", func(m *ModeReport) string { return ms(m.LatencyAllMS.P99) })
	row("stream TTFT p50", func(m *ModeReport) string { return ms(m.TTFTMS.P50) })
	row("stream TTFT p99", func(m *ModeReport) string { return ms(m.TTFTMS.P99) })
	if r.anyCache() {
		count := func(p Percentiles) string { return fmt.Sprint(p.N) }
		row("streams writing cache", func(m *ModeReport) string { return count(m.TTFTWriteMS) })
		row("  their TTFT p50 / p99", func(m *ModeReport) string {
			return fmt.Sprintf("%.0f / %.0f ms", m.TTFTWriteMS.P50, m.TTFTWriteMS.P99)
		})
		row("streams reading cache", func(m *ModeReport) string { return count(m.TTFTReadMS) })
		row("  their TTFT p50 / p99", func(m *ModeReport) string {
			return fmt.Sprintf("%.0f / %.0f ms", m.TTFTReadMS.P50, m.TTFTReadMS.P99)
		})
	}
	row("peak upstream in-flight", func(m *ModeReport) string { return fmt.Sprint(m.PeakUpstreamInflight) })
	row("peak upstream in-flight (10ms samples)", func(m *ModeReport) string { return fmt.Sprint(m.PeakUpstreamSampled) })
	row("peak gate slots held", func(m *ModeReport) string { return fmt.Sprint(m.PeakGateInflight) })
	row("mean upstream in-flight", func(m *ModeReport) string { return fmt.Sprintf("%.1f", m.MeanUpstreamInflight) })
	row("peak queued in sluice", func(m *ModeReport) string { return fmt.Sprint(m.PeakQueued) })
	row("upstream calls", func(m *ModeReport) string { return fmt.Sprint(m.UpstreamCalls) })
	row("upstream 429 / 529", func(m *ModeReport) string { return fmt.Sprintf("%d / %d", m.Upstream429, m.Upstream529) })
	row("client retries", func(m *ModeReport) string { return fmt.Sprint(m.Retries) })
	row("tokens in/out", func(m *ModeReport) string { return fmt.Sprintf("%d/%d", m.Tokens.Input, m.Tokens.Output) })
	row("cache write/read", func(m *ModeReport) string {
		return fmt.Sprintf("%d/%d", m.Tokens.CacheCreation, m.Tokens.CacheRead)
	})
	row("cost", func(m *ModeReport) string { return fmt.Sprintf("$%.4f", m.CostUSD) })
	row("input cost", func(m *ModeReport) string { return fmt.Sprintf("$%.4f", m.InputCostUSD) })
	row("errors", func(m *ModeReport) string { return errorList(m.Errors) })
	tw.Flush()
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
