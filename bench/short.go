package bench

import (
	"math"
	"slices"
	"time"
)

// ShortFactor is how much --short shrinks a scenario: its durations and
// the counts spread over them, so that the suite runs in seconds.
const ShortFactor = 0.1

// Short is a copy of the scenario scaled down by f, keeping its shape:
// every stretch of the workload and of the upstream's schedule (spikes,
// outages, capacity steps, tenants' starts) lasts f times as long, a
// burst spread over a duration sends f times as many, and the rates stay,
// so that the load against the upstream's capacity is the same. A burst sent at once
// keeps at least twice the gate's slots (or all of it, if fewer), the
// shape that makes it a burst. The upstream's latencies, rate limits and
// the clients stay as they are: a short run is for the invariants, not
// for the figures.
func (sc *Scenario) Short(f float64) *Scenario {
	out := *sc
	out.Sim.Spikes = slices.Clone(sc.Sim.Spikes)
	for i := range out.Sim.Spikes {
		out.Sim.Spikes[i].From = scaled(out.Sim.Spikes[i].From, f)
		out.Sim.Spikes[i].To = scaled(out.Sim.Spikes[i].To, f)
	}
	out.Sim.Outages = slices.Clone(sc.Sim.Outages)
	for i := range out.Sim.Outages {
		out.Sim.Outages[i].From = scaled(out.Sim.Outages[i].From, f)
		out.Sim.Outages[i].To = scaled(out.Sim.Outages[i].To, f)
	}
	out.Sim.CapacitySteps = slices.Clone(sc.Sim.CapacitySteps)
	for i := range out.Sim.CapacitySteps {
		out.Sim.CapacitySteps[i].From = scaled(out.Sim.CapacitySteps[i].From, f)
	}
	slots := sc.SluiceConfig(true).MaxConcurrency
	w := &out.Workload
	w.N = shortCount(w.N, w.Duration, slots, f)
	w.Duration = scaled(w.Duration, f)
	w.Steps = slices.Clone(sc.Workload.Steps)
	for i := range w.Steps {
		w.Steps[i].Duration = scaled(w.Steps[i].Duration, f)
	}
	// A budget shrinks with the spend: the tenant meets it as far into
	// the run.
	out.Sluice.Budgets = slices.Clone(sc.Sluice.Budgets)
	for i := range out.Sluice.Budgets {
		out.Sluice.Budgets[i].USD *= f
	}
	w.Tenants = slices.Clone(sc.Workload.Tenants)
	for i := range w.Tenants {
		t := &w.Tenants[i]
		t.N = shortCount(t.N, t.Duration, slots, f)
		t.Duration, t.Start = scaled(t.Duration, f), scaled(t.Start, f)
	}
	return &out
}

func scaled(d Duration, f float64) Duration {
	return Duration(time.Duration(math.Round(float64(d) * f)))
}

// shortCount is a burst's count scaled by f: at once, no fewer than
// twice the slots (nor more than it was).
func shortCount(n int, over Duration, slots int, f float64) int {
	if n == 0 {
		return 0
	}
	m := max(1, int(math.Ceil(float64(n)*f)))
	if over == 0 {
		m = max(m, min(n, 2*slots))
	}
	return m
}
