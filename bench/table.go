package bench

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

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

func showMS(v []float64) string { return fmt.Sprintf("%.0f ms", v[0]) }

func throughSluice(m *ModeReport) bool { return m.Mode != ModeDirect }

func windowed(m *ModeReport) bool { return m.Windowed || m.Mode == ModeWindowed }

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
