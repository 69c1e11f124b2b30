package bench

import (
	"slices"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/sim"
)

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
	// UpstreamByKey, with backends, counts the calls the upstream answered
	// by sluice's key that made them (backend/n, as sluice names them).
	UpstreamByKey map[string]int64 `json:"upstream_by_key,omitempty"`
	Tokens        sim.TokenStats   `json:"tokens"`
	CostUSD       float64          `json:"cost_usd"`
	InputCostUSD  float64          `json:"input_cost_usd"`
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
	// Budgets are the scenario's budgets (sluice.budgets), in its order,
	// as sluice counted them by the run's end.
	Budgets []BudgetReport `json:"budgets,omitempty"`
}

// BudgetReport is one tenant's budget in one mode: its limit, what
// sluice counted the tenant spent, past the limit by how much (the
// answers of requests in flight when it was crossed), and how many of
// its requests were refused (402 billing_error).
type BudgetReport struct {
	Tenant       string  `json:"tenant"`
	LimitUSD     float64 `json:"limit_usd"`
	SpentUSD     float64 `json:"spent_usd"`
	OvershootUSD float64 `json:"overshoot_usd"`
	Refused      int     `json:"refused"`
}

// budgetReports are the figures of the budgets on tenants, from what
// sluice counted (st) and the records' refusals.
func budgetReports(st []budget.Status, tenants []string, recs []Record) []BudgetReport {
	var out []BudgetReport
	for _, tn := range tenants {
		i := slices.IndexFunc(st, func(s budget.Status) bool { return s.Name == budgetName(tn) })
		if i < 0 {
			continue
		}
		b := BudgetReport{Tenant: tn, LimitUSD: st[i].Limit, SpentUSD: st[i].Spent, OvershootUSD: st[i].Overshoot}
		for _, r := range recs {
			if r.Tenant == tn && r.ErrorType == "billing_error" {
				b.Refused++
			}
		}
		out = append(out, b)
	}
	return out
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

func modeReport(res *ModeResult) ModeReport {
	m := ModeReport{Mode: res.Mode, Errors: map[string]int{}, Cap: res.Cap, Windowed: res.Windowed,
		UpstreamByStatus: res.Sim.ByStatus, Tokens: res.Sim.Tokens, CostUSD: res.Sim.CostUSD, InputCostUSD: res.Sim.InputCostUSD,
		PeakUpstreamInflight: int(res.Sim.PeakInflight), Upstream429: res.Sim.ByStatus["429"],
		Upstream529: res.Sim.ByStatus["529"], UpstreamCalls: res.Sim.Requests}
	m.Offered = len(res.Records)
	for hash, name := range res.KeyNames {
		if m.UpstreamByKey == nil {
			m.UpstreamByKey = map[string]int64{}
		}
		m.UpstreamByKey[name] = res.Sim.Credentials["x-api-key "+hash]
	}
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
