package overhead

import (
	"fmt"
	"io"
	"slices"
)

// Report is one run: every measurement, and a row per path.
type Report struct {
	Rounds    int           `json:"rounds"`
	Seconds   float64       `json:"seconds"` // each measurement's recorded span
	Clients   int           `json:"clients"`
	Streams   int           `json:"streams"`
	Cap       int           `json:"cap"`
	HAProxy   string        `json:"haproxy"` // its version, or why it was skipped
	LoadStart string        `json:"loadavg_start"`
	LoadEnd   string        `json:"loadavg_end"`
	Long      *Pace         `json:"long,omitempty"` // the long-stream mode's pace; nil: the three phases
	Runs      []Measurement `json:"runs"`
	Rows      []Row         `json:"rows"` // direct first, then in the order of the rounds
}

// Measurement is one measurement: one path, one phase, one round.
type Measurement struct {
	Round  int        `json:"round"`
	Path   string     `json:"path"`
	Phase  string     `json:"phase"`
	Result loadResult `json:"result"`
}

// Row is one path's figures over the rounds. An "added" figure is the
// median over the rounds of the path's figure less direct's in the same
// round; a ratio likewise. CPU figures are totals over the rounds.
type Row struct {
	Path string `json:"path"`
	// One client, JSON.
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	AddedP50 float64 `json:"added_p50_ms"`
	AddedP99 float64 `json:"added_p99_ms"`
	// Options.Clients clients, JSON.
	RPS          float64 `json:"rps"`
	VsDirect     float64 `json:"throughput_vs_direct"`
	CPUPer1000   float64 `json:"cpu_s_per_1000"` // the proxy's CPU seconds per 1,000 requests; 0 for direct
	CPUVsHAProxy float64 `json:"cpu_vs_haproxy"` // 0 without HAProxy or for direct
	// Options.Streams concurrent streams.
	EventsPerSecond    float64 `json:"events_per_s"`
	EventsPerCPUSecond float64 `json:"events_per_cpu_s"` // 0 for direct
	AddedTTFE50        float64 `json:"added_ttfe_p50_ms"`
	AddedTTFE99        float64 `json:"added_ttfe_p99_ms"`
	// The long-stream mode's: the proxy's RSS and goroutines in the middle
	// of the span less before it, per stream then open (medians over the
	// rounds); 0 for direct, and goroutines only for sluice.
	RSSPerStreamKB      float64 `json:"rss_per_stream_kb,omitempty"`
	GoroutinesPerStream float64 `json:"goroutines_per_stream,omitempty"`
	Errors              int64   `json:"errors"` // in every phase
}

// summarize fills Rows from Runs.
func (r *Report) summarize() {
	type key struct {
		round       int
		path, phase string
	}
	by := map[key]loadResult{}
	var paths []string
	for _, run := range r.Runs {
		by[key{run.Round, run.Path, run.Phase}] = run.Result
		if !slices.Contains(paths, run.Path) {
			paths = append(paths, run.Path)
		}
	}
	perRound := func(path, phase string, f func(t, d loadResult) float64) float64 {
		var v []float64
		for round := 1; round <= r.Rounds; round++ {
			t, ok1 := by[key{round, path, phase}]
			d, ok2 := by[key{round, Direct, phase}]
			if ok1 && ok2 {
				v = append(v, f(t, d))
			}
		}
		return median(v)
	}
	cpu := func(path, phase string) (cpu float64, requests, events int64) {
		for round := 1; round <= r.Rounds; round++ {
			if t, ok := by[key{round, path, phase}]; ok && len(t.CPU) > 0 {
				cpu += t.CPU[0]
				requests += t.Requests
				events += t.Events
			}
		}
		return
	}
	r.Rows = nil
	for _, p := range paths {
		row := Row{Path: p}
		row.P50 = perRound(p, phaseLatency, func(t, _ loadResult) float64 { return t.P50 })
		row.P99 = perRound(p, phaseLatency, func(t, _ loadResult) float64 { return t.P99 })
		row.AddedP50 = perRound(p, phaseLatency, func(t, d loadResult) float64 { return t.P50 - d.P50 })
		row.AddedP99 = perRound(p, phaseLatency, func(t, d loadResult) float64 { return t.P99 - d.P99 })
		row.RPS = perRound(p, phaseThroughput, func(t, _ loadResult) float64 { return float64(t.Requests) / t.Seconds })
		row.VsDirect = perRound(p, phaseThroughput, func(t, d loadResult) float64 {
			return (float64(t.Requests) / t.Seconds) / (float64(d.Requests) / d.Seconds)
		})
		row.EventsPerSecond = perRound(p, phaseStreams, func(t, _ loadResult) float64 { return float64(t.Events) / t.Seconds })
		row.AddedTTFE50 = perRound(p, phaseStreams, func(t, d loadResult) float64 { return t.TTFE50 - d.TTFE50 })
		row.AddedTTFE99 = perRound(p, phaseStreams, func(t, d loadResult) float64 { return t.TTFE99 - d.TTFE99 })
		perStream := func(f func(t loadResult) float64) float64 {
			var v []float64
			for round := 1; round <= r.Rounds; round++ {
				if t, ok := by[key{round, p, phaseStreams}]; ok && t.Open > 0 {
					v = append(v, f(t)/float64(t.Open))
				}
			}
			return median(v)
		}
		row.RSSPerStreamKB = perStream(func(t loadResult) float64 {
			if t.RSSLoadedKB == 0 {
				return 0
			}
			return float64(t.RSSLoadedKB - t.RSSIdleKB)
		})
		row.GoroutinesPerStream = perStream(func(t loadResult) float64 { return t.GoroutinesLoaded - t.GoroutinesIdle })
		if c, n, _ := cpu(p, phaseThroughput); n > 0 && p != Direct {
			row.CPUPer1000 = c / float64(n) * 1000
		}
		if c, _, ev := cpu(p, phaseStreams); c > 0 && p != Direct {
			row.EventsPerCPUSecond = float64(ev) / c
		}
		for _, run := range r.Runs {
			if run.Path == p {
				row.Errors += run.Result.Errors
			}
		}
		r.Rows = append(r.Rows, row)
	}
	if h := r.Row(HAProxy); h != nil && h.CPUPer1000 > 0 {
		for i := range r.Rows {
			if r.Rows[i].Path != Direct {
				r.Rows[i].CPUVsHAProxy = r.Rows[i].CPUPer1000 / h.CPUPer1000
			}
		}
	}
}

// Row is path's row, or nil.
func (r *Report) Row(path string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Path == path {
			return &r.Rows[i]
		}
	}
	return nil
}

// WriteMarkdown writes the rows as a markdown table, with what the run
// was and the load average it ran under.
func (r *Report) WriteMarkdown(w io.Writer) {
	if r.Long != nil {
		r.writeLong(w)
		return
	}
	fmt.Fprintf(w, "%d rounds of %.1f s per measurement, interleaved; %d clients for throughput; %d concurrent streams; windowed: BATCH_MAX_CONCURRENCY=%d, idle release; HAProxy: %s; load average %s at the start, %s at the end.\n\n",
		r.Rounds, r.Seconds, r.Clients, r.Streams, r.Cap, r.HAProxy, r.LoadStart, r.LoadEnd)
	fmt.Fprintf(w, "| path | p50 at 1 client | added p50 | added p99 | throughput at %d clients | vs direct | CPU s per 1,000 req | CPU vs HAProxy | SSE events/s (%d streams) | events per CPU-second | added TTFE p50 | added TTFE p99 | errors |\n", r.Clients, r.Streams)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, row := range r.Rows {
		dash := row.Path == Direct
		fmt.Fprintf(w, "| %s | %.3f ms | %s | %s | %.0f/s | %.2f× | %s | %s | %.0f | %s | %s | %s | %d |\n",
			row.Path, row.P50,
			added(row.AddedP50, dash), added(row.AddedP99, dash),
			row.RPS, row.VsDirect,
			orDash(fmt.Sprintf("%.3f", row.CPUPer1000), dash), orDash(fmt.Sprintf("%.2f×", row.CPUVsHAProxy), dash || row.CPUVsHAProxy == 0),
			row.EventsPerSecond, orDash(fmt.Sprintf("%.0f", row.EventsPerCPUSecond), dash),
			added(row.AddedTTFE50, dash), added(row.AddedTTFE99, dash), row.Errors)
	}
}

func added(ms float64, dash bool) string {
	return orDash(fmt.Sprintf("%+.3f ms", ms), dash)
}

func orDash(s string, dash bool) string {
	if dash {
		return "—"
	}
	return s
}

// median of v; 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// writeLong writes the long-stream mode's rows.
func (r *Report) writeLong(w io.Writer) {
	p := r.Long
	fmt.Fprintf(w, "%d round(s) of %.1f s; %d concurrent streams, each %d bursts of %d events %s apart (%d events a stream), one after the other on each client's connection; windowed: BATCH_MAX_CONCURRENCY=%d; HAProxy: %s; load average %s at the start, %s at the end.\n\n",
		r.Rounds, r.Seconds, r.Streams, p.Bursts, p.Burst, p.Pause, p.events(), r.Cap, r.HAProxy, r.LoadStart, r.LoadEnd)
	fmt.Fprintln(w, "| path | SSE events/s | events per CPU-second | RSS per open stream | goroutines per open stream | added TTFE p50 | added TTFE p99 | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, row := range r.Rows {
		dash := row.Path == Direct
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %s | %s | %s | %d |\n",
			row.Path, row.EventsPerSecond, orDash(fmt.Sprintf("%.0f", row.EventsPerCPUSecond), dash),
			orDash(fmt.Sprintf("%.1f KB", row.RSSPerStreamKB), dash || row.RSSPerStreamKB == 0),
			orDash(fmt.Sprintf("%.2f", row.GoroutinesPerStream), dash || row.GoroutinesPerStream == 0),
			added(row.AddedTTFE50, dash), added(row.AddedTTFE99, dash), row.Errors)
	}
}
