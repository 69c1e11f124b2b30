// Package benchtrace makes the page's traces from the bench's runs: the
// page's own burst run on request (Run, which cmd/sluice gives the page as
// web.Options.Run) and the suite's scenarios shipped with the binary
// (SuiteTrace, for gentrace). It is apart from web so that the page, and
// with it the proxy's binary graph below cmd/sluice, does not import the
// load generator (and its plotting) it never runs on its own.
package benchtrace

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/web"
)

// scenario is the bench scenario of a page run of p.
func scenario(p web.Params) *bench.Scenario {
	retries := 0
	sc := &bench.Scenario{
		Name:        "page",
		Description: fmt.Sprintf("%d requests at once, from the page", p.Burst),
		Seed:        1,
		Sim: bench.SimSpec{TTFT: bench.Duration(time.Duration(p.LatencyMS) * time.Millisecond),
			PerToken: bench.Duration(web.RunPerToken), Jitter: 0.1, Capacity: p.Capacity},
		Sluice: bench.Sluice{MaxSize: p.MaxSize, MaxWait: bench.Duration(time.Duration(p.MaxWaitMS) * time.Millisecond),
			MaxConcurrency: p.MaxConcurrency, Timeout: bench.Duration(web.RunLimit)},
		Client: bench.Client{Timeout: bench.Duration(web.RunLimit), MaxRetries: &retries},
		Workload: bench.Workload{Kind: "burst", N: p.Burst, StreamFraction: 0.5,
			PromptTokens: [2]int{200, 2000}, OutputTokens: [2]int{16, web.RunOutputTokensMax}},
	}
	if p.SpikeFactor != 0 && p.SpikeFactor != 1 {
		sc.Sim.Spikes = []bench.SpikeSpec{{From: bench.Duration(time.Duration(p.SpikeFromMS) * time.Millisecond),
			To: bench.Duration(time.Duration(p.SpikeToMS) * time.Millisecond), Factor: p.SpikeFactor}}
	}
	return sc
}

// recorder is a proxy.Observer that keeps what one bench mode's proxy saw.
type recorder struct {
	mu    sync.Mutex
	waves []waveAt
	byKey map[string]proxy.Exchange // by X-Bench-Attempt
}

type waveAt struct {
	web.Wave
	t time.Time
}

func (r *recorder) WaveFlushed(id uint64, size int, reason string) {
	r.mu.Lock()
	r.waves = append(r.waves, waveAt{web.Wave{ID: id, Size: size, Reason: reason}, time.Now()})
	r.mu.Unlock()
}

func (r *recorder) RequestDone(ex proxy.Exchange) {
	key := ex.Request.Header.Get("X-Bench-Attempt")
	ex.Request = nil
	r.mu.Lock()
	r.byKey[key] = ex
	r.mu.Unlock()
}

// Run runs p through the plain and the windowed path and returns the trace.
func Run(ctx context.Context, p web.Params) (*web.Trace, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, web.RunLimit)
	defer cancel()
	recs := map[string]*recorder{}
	opt := bench.Options{Scenario: scenario(p), Modes: []string{bench.ModePlain, bench.ModeWindowed},
		Observer: func(mode string) proxy.Observer {
			r := &recorder{byKey: map[string]proxy.Exchange{}}
			recs[mode] = r
			return r
		}}
	rep, err := bench.Run(ctx, opt)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("the run passed its limit of %s", web.RunLimit)
	}
	tr := &web.Trace{Params: p, Generated: time.Now().UTC().Truncate(time.Second), Verdict: bench.VerdictOf("latency", rep, nil, "").Line}
	for _, res := range rep.Results() {
		tr.Lanes = append(tr.Lanes, lane(res, recs[res.Mode], p.MaxConcurrency))
	}
	return tr, nil
}

func lane(res *bench.ModeResult, rec *recorder, cap int) web.Lane {
	ms := func(t time.Time) float64 { return math.Round(float64(t.Sub(res.Start))/1e5) / 10 }
	opt := func(t time.Time) *float64 {
		if t.IsZero() {
			return nil
		}
		v := ms(t)
		return &v
	}
	l := web.Lane{Mode: res.Mode, Cap: cap, UpstreamPeak: int(res.Sim.PeakInflight), Waves: []web.Wave{}}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	flushAt := map[uint64]float64{}
	for _, w := range rec.waves {
		w.At = ms(w.t)
		flushAt[w.ID] = w.At
		l.Waves = append(l.Waves, w.Wave)
	}
	for _, r := range res.Records {
		q := web.Request{ID: r.ID, Arrive: math.Round(r.ArrivalMS*10) / 10, Done: math.Round(r.DoneMS*10) / 10,
			Outcome: r.Outcome, Status: r.Status, Error: r.ErrorType, Stream: r.Stream}
		if ex, ok := rec.byKey[strconv.Itoa(r.ID)+"."+strconv.Itoa(r.Retries)]; ok {
			q.Slot, q.Release = opt(ex.Granted), opt(ex.Released)
			if ex.Wave != 0 {
				q.Wave = ex.Wave
				if at, ok := flushAt[ex.Wave]; ok {
					q.Flush = &at
				}
			}
		}
		l.Requests = append(l.Requests, q)
	}
	sort.Slice(l.Requests, func(i, j int) bool { return l.Requests[i].ID < l.Requests[j].ID })
	return l
}
