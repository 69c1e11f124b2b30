package benchtrace

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/web"
)

// maxSeriesPoints bounds a lane's series: enough for a chart as wide as a
// screen, small enough for the file's budget.
const maxSeriesPoints = 600

// SuiteTrace is the page's trace of one suite entry (bench.RunSuite's,
// run with one seed).
func SuiteTrace(e bench.SuiteEntry, sc *bench.Scenario) (*web.ScenarioTrace, error) {
	rep := e.Report
	if rep == nil || len(rep.Results()) == 0 {
		return nil, fmt.Errorf("%s: no run to trace", e.Scenario)
	}
	tr := &web.ScenarioTrace{Format: web.TraceFormat, Name: e.Scenario, Desc: e.Description, Generated: time.Now().UTC().Truncate(time.Second),
		Version: rep.Version, Seed: rep.Seed, Cap: rep.Sluice.MaxConcurrency, Cols: web.ReqCols,
		Slots: sc.Sim.Capacity, OverloadAt: sc.Sim.OverloadAt,
		Verdict: web.TraceVerdict{Kind: e.Verdict.Kind, Line: e.Verdict.Line, Outcome: e.Verdict.Outcome, Tenant: e.Tenant}}
	for _, sp := range rep.Spikes {
		tr.Spikes = append(tr.Spikes, web.Spike{FromS: sp.FromS, ToS: sp.ToS, Factor: sp.Factor})
	}
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
		figures, err := json.Marshal(fig)
		if err != nil {
			return nil, fmt.Errorf("%s: mode %s: %w", e.Scenario, res.Mode, err)
		}
		l := web.TraceLane{Mode: res.Mode, Windowed: res.Windowed, Cap: res.Cap, Figures: figures, Series: series(res)}
		tr.Bucket = max(tr.Bucket, res.InputBucketSize)
		recs := slices.Clone(res.Records)
		sort.Slice(recs, func(i, j int) bool { return recs[i].ID < recs[j].ID })
		for _, r := range recs {
			l.Req = append(l.Req, row(r, tenant))
		}
		tr.Lanes = append(tr.Lanes, l)
	}
	if e.AloneReport != nil {
		tr.Alone = &web.TraceAlone{Name: e.Alone, Tenant: e.Tenant}
		for _, m := range e.AloneReport.Modes {
			figures, err := json.Marshal(m)
			if err != nil {
				return nil, fmt.Errorf("%s: alone: mode %s: %w", e.Scenario, m.Mode, err)
			}
			tr.Alone.Figures = append(tr.Alone.Figures, figures)
		}
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
	out := make([]float64, len(web.ReqCols))
	out[web.ColID] = float64(r.ID)
	out[web.ColArrive], out[web.ColSlot], out[web.ColFirst], out[web.ColDone] = tenth(r.ArrivalMS), opt(r.SlotMS), opt(r.FirstTokenMS), tenth(r.DoneMS)
	switch r.Outcome {
	case "ok":
	case "lost":
		out[web.ColOutcome] = 2
	default:
		out[web.ColOutcome] = 1
	}
	out[web.ColStatus], out[web.ColRetries] = float64(r.Status), float64(r.Retries)
	if r.Stream {
		out[web.ColStream] = 1
	}
	out[web.ColCache] = float64(cacheRole(r))
	out[web.ColTenant] = tenant[r.Tenant]
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
func series(res *bench.ModeResult) web.TraceSeries {
	var end time.Duration
	if n := len(res.Samples); n > 0 {
		end = res.Samples[n-1].T
	}
	step := 10 * time.Millisecond
	for end/step >= maxSeriesPoints {
		step += 10 * time.Millisecond
	}
	s := web.TraceSeries{StepMS: float64(step) / float64(time.Millisecond)}
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

// RecomputedVerdict recomputes the trace's verdict line with the suite's
// code (bench.VerdictOf) from the figures the file carries.
func RecomputedVerdict(tr *web.ScenarioTrace) (bench.ScenarioVerdict, error) {
	modes := func(raws []json.RawMessage) ([]bench.ModeReport, error) {
		out := make([]bench.ModeReport, len(raws))
		for i, raw := range raws {
			if err := json.Unmarshal(raw, &out[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	var lanes []json.RawMessage
	for _, l := range tr.Lanes {
		lanes = append(lanes, l.Figures)
	}
	ms, err := modes(lanes)
	if err != nil {
		return bench.ScenarioVerdict{}, fmt.Errorf("%s: figures: %w", tr.Name, err)
	}
	rep := &bench.Report{Scenario: tr.Name, Seed: tr.Seed, Modes: ms}
	var alone *bench.Report
	if tr.Alone != nil {
		ms, err := modes(tr.Alone.Figures)
		if err != nil {
			return bench.ScenarioVerdict{}, fmt.Errorf("%s: alone's figures: %w", tr.Name, err)
		}
		alone = &bench.Report{Scenario: tr.Alone.Name, Seed: tr.Seed, Modes: ms}
	}
	return bench.VerdictOf(tr.Verdict.Kind, rep, alone, tr.Verdict.Tenant), nil
}
