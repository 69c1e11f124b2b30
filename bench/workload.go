package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// Arrival is one request of a workload: when it arrives, counted from the
// start of the run, and what it asks for.
type Arrival struct {
	At           time.Duration
	Stream       bool
	PromptTokens int
	OutputTokens int
	// Session, Turn and Turns place a request in its session when the
	// workload has turns (Turns > 1): it is sent once the session's turn
	// before it has ended, and At is its session's start.
	Session, Turn, Turns int
	// History is the PromptTokens of the session's earlier turns, in
	// order, so that a turn repeats them as they were sent (a client
	// resends its conversation byte for byte, which the API's lookback
	// reads).
	History []int
	// Tenant names the request's tenant in a tenants workload: it is sent
	// with the API key sk-bench-<tenant>, so that sluice's default
	// TENANT_FROM=key tells the tenants apart. "" is the one tenant
	// sk-bench.
	Tenant string
	// Body, when set, is the request's body as it is sent (a replayed
	// recording's, see replay.go), instead of one built from the fields
	// above.
	Body string
}

// Arrivals builds the workload's requests in arrival order. The same
// scenario and seed always give the same list.
func (sc *Scenario) Arrivals() ([]Arrival, error) {
	if sc.arrivals != nil {
		return slices.Clone(sc.arrivals), nil // a replay's
	}
	w := sc.Workload
	if w.Kind == "tenants" {
		return sc.tenantArrivals()
	}
	rng := rand.New(rand.NewPCG(uint64(sc.Seed), 0x5eed))
	var times []time.Duration
	var fromTrace []Arrival
	switch w.Kind {
	case "burst":
		times = make([]time.Duration, w.N)
		for i := range times {
			times[i] = w.Duration.D() * time.Duration(i) / time.Duration(w.N)
		}
	case "poisson":
		times = poisson(rng, 0, w.Duration.D(), func(float64) float64 { return w.Rate }, w.Rate)
	case "ramp":
		d := w.Duration.D().Seconds()
		rate := func(t float64) float64 { return w.FromRate + (w.Rate-w.FromRate)*t/d }
		times = poisson(rng, 0, w.Duration.D(), rate, math.Max(w.Rate, w.FromRate))
	case "steps":
		var at time.Duration
		for _, st := range w.Steps {
			if st.Rate > 0 {
				times = append(times, poisson(rng, at, st.Duration.D(), func(float64) float64 { return st.Rate }, st.Rate)...)
			}
			at += st.Duration.D()
		}
	case "trace":
		var err error
		if fromTrace, err = readTrace(sc.dir, w.Trace); err != nil {
			return nil, err
		}
	}
	pmin, pmax := rangeOr(w.PromptTokens, 200, 2000)
	omin, omax := rangeOr(w.OutputTokens, 32, 128)
	out := make([]Arrival, 0, max(len(times), len(fromTrace)))
	for _, t := range times {
		out = append(out, Arrival{At: t})
	}
	if fromTrace != nil {
		out = fromTrace
	}
	if w.Turns > 1 {
		sessions := out
		out = make([]Arrival, 0, len(sessions)*w.Turns)
		for i, s := range sessions {
			for t := range w.Turns {
				s.Session, s.Turn, s.Turns = i, t, w.Turns
				out = append(out, s)
			}
		}
	}
	for i := range out {
		a := &out[i]
		// Draw every field for every request so that a trace that pins
		// some of them does not shift the draws of the others.
		stream := rng.Float64() < w.StreamFraction
		prompt := pmin + rng.IntN(pmax-pmin+1)
		output := omin + rng.IntN(omax-omin+1)
		if fromTrace == nil {
			a.Stream = stream
		}
		if a.PromptTokens == 0 {
			a.PromptTokens = prompt
		}
		if a.OutputTokens == 0 {
			a.OutputTokens = output
		}
	}
	if w.Turns > 1 {
		sent := map[int][]int{} // each session's turns' prompt tokens so far
		for i := range out {
			a := &out[i]
			a.History = sent[a.Session]
			sent[a.Session] = append(slices.Clip(sent[a.Session]), a.PromptTokens)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}

// tenantArrivals merges the arrivals of each tenant's own workload, each
// drawn with a seed of its own (the scenario's and a hash of its name, so
// that a tenant draws alike in a scenario without the others) and
// shifted by its start, in arrival order.
func (sc *Scenario) tenantArrivals() ([]Arrival, error) {
	var out []Arrival
	for i, tw := range sc.Workload.Tenants {
		sub := *sc
		h := fnv.New64a()
		h.Write([]byte(tw.Name))
		sub.Seed = sc.Seed ^ int64(h.Sum64()>>1)
		sub.Workload = sc.Workload
		sub.Workload.Kind, sub.Workload.N, sub.Workload.Rate, sub.Workload.Duration = tw.Kind, tw.N, tw.Rate, tw.Duration
		sub.Workload.Tenants = nil
		if tw.PromptTokens != [2]int{} {
			sub.Workload.PromptTokens = tw.PromptTokens
		}
		if tw.OutputTokens != [2]int{} {
			sub.Workload.OutputTokens = tw.OutputTokens
		}
		as, err := sub.Arrivals()
		if err != nil {
			return nil, fmt.Errorf("workload.tenants[%d]: %w", i, err)
		}
		for _, a := range as {
			a.At += tw.Start.D()
			a.Tenant = tw.Name
			out = append(out, a)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out, nil
}

func rangeOr(r [2]int, lo, hi int) (int, int) {
	if r == [2]int{} {
		return lo, hi
	}
	return r[0], r[1]
}

// poisson draws the arrival times of a Poisson process with the given rate
// (per second, as a function of seconds since from) during [from, from+d),
// by thinning a process at peak.
func poisson(rng *rand.Rand, from, d time.Duration, rate func(float64) float64, peak float64) []time.Duration {
	var out []time.Duration
	for t := 0.0; ; {
		t += rng.ExpFloat64() / peak
		if t >= d.Seconds() {
			return out
		}
		if rng.Float64()*peak <= rate(t) {
			out = append(out, from+time.Duration(t*float64(time.Second)))
		}
	}
}

// traceLine is one line of an arrival trace.
type traceLine struct {
	AtMS         *float64 `json:"at_ms"`
	ArrivalMS    *float64 `json:"arrival_ms"`
	Mode         string   `json:"mode"`
	Stream       bool     `json:"stream"`
	PromptTokens int      `json:"prompt_tokens"`
	OutputTokens int      `json:"output_tokens"`
}

func readTrace(dir fs.FS, name string) ([]Arrival, error) {
	f, err := dir.Open(name)
	if err != nil {
		return nil, fmt.Errorf("workload.trace: %w", err)
	}
	defer f.Close()
	var out []Arrival
	mode := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l traceLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("workload.trace %s: line %d: %w", name, n, err)
		}
		if l.Mode != "" {
			if mode == "" {
				mode = l.Mode
			} else if l.Mode != mode {
				continue // a bench trace: replay its first mode only
			}
		}
		at := l.AtMS
		if at == nil {
			at = l.ArrivalMS
		}
		if at == nil || *at < 0 {
			return nil, fmt.Errorf("workload.trace %s: line %d: needs at_ms (or arrival_ms) >= 0", name, n)
		}
		out = append(out, Arrival{At: time.Duration(*at * float64(time.Millisecond)), Stream: l.Stream,
			PromptTokens: l.PromptTokens, OutputTokens: l.OutputTokens})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("workload.trace %s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("workload.trace %s: no arrivals", name)
	}
	return out, nil
}
