package bench

import (
	"math"
	"slices"
	"time"
)

// Percentiles summarise a set of durations in milliseconds.
type Percentiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// percentile is the nearest-rank q-quantile (0 < q <= 1) of sorted values.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// summarise returns the percentiles of vs (which it sorts).
func summarise(vs []float64) Percentiles {
	if len(vs) == 0 {
		return Percentiles{}
	}
	slices.Sort(vs)
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	return Percentiles{N: len(vs), Mean: sum / float64(len(vs)), P50: percentile(vs, 0.50),
		P90: percentile(vs, 0.90), P99: percentile(vs, 0.99), Max: vs[len(vs)-1]}
}

// goodput is successes per second over span.
func goodput(successes int, span time.Duration) float64 {
	if span <= 0 {
		return 0
	}
	return float64(successes) / span.Seconds()
}

// Little is Little's Law, L = λW, checked on the upstream over a window:
// L is the mean of the sampled in-flight count, λ the upstream calls that
// ended in the window per second, W their mean duration.
type Little struct {
	FromS           float64 `json:"from_s"`
	ToS             float64 `json:"to_s"`
	MeanInflight    float64 `json:"mean_inflight_L"`
	ThroughputRPS   float64 `json:"throughput_rps_lambda"`
	MeanServiceMS   float64 `json:"mean_service_ms_W"`
	LambdaTimesW    float64 `json:"lambda_times_W"`
	RatioLToLambdaW float64 `json:"ratio_L_to_lambda_W"`
}

// littleOver computes Little over [from, to) from the samples and the
// upstream calls. It returns nil if the window holds no calls.
func littleOver(samples []Sample, calls []Interval, from, to time.Duration) *Little {
	if to <= from {
		return nil
	}
	var sum float64
	n := 0
	for _, s := range samples {
		if s.T >= from && s.T < to {
			sum += float64(s.UpstreamInflight)
			n++
		}
	}
	var served int
	var service time.Duration
	for _, c := range calls {
		if c.End >= from && c.End < to && c.Status == 200 {
			served++
			service += c.End - c.Start
		}
	}
	if n == 0 || served == 0 {
		return nil
	}
	l := &Little{FromS: from.Seconds(), ToS: to.Seconds(), MeanInflight: sum / float64(n),
		ThroughputRPS: float64(served) / (to - from).Seconds(),
		MeanServiceMS: float64(service) / float64(served) / float64(time.Millisecond)}
	l.LambdaTimesW = l.ThroughputRPS * l.MeanServiceMS / 1000
	if l.LambdaTimesW > 0 {
		l.RatioLToLambdaW = l.MeanInflight / l.LambdaTimesW
	}
	return l
}

// Saturation is the windowed path's throughput while its gate was full,
// against Little's bound for it: cap slots each held for W give at most
// cap/W calls per second.
type Saturation struct {
	SecondsFull   float64 `json:"seconds_full"`
	ThroughputRPS float64 `json:"throughput_rps"`
	MeanServiceMS float64 `json:"mean_service_ms_W"`
	BoundRPS      float64 `json:"bound_rps_cap_over_W"`
	Ratio         float64 `json:"ratio"`
}

// saturation finds the longest stretch of samples in which the gate held
// all cap slots, and measures the upstream throughput in it.
func saturation(samples []Sample, calls []Interval, cap int) *Saturation {
	if cap <= 0 {
		return nil
	}
	var bestFrom, bestTo, from time.Duration
	in := false
	for i, s := range samples {
		full := s.GateInflight >= cap
		switch {
		case full && !in:
			in, from = true, s.T
		case !full && in:
			in = false
			if s.T-from > bestTo-bestFrom {
				bestFrom, bestTo = from, samples[i].T
			}
		}
	}
	if in && len(samples) > 0 && samples[len(samples)-1].T-from > bestTo-bestFrom {
		bestFrom, bestTo = from, samples[len(samples)-1].T
	}
	if bestTo-bestFrom < 200*time.Millisecond {
		return nil
	}
	l := littleOver(samples, calls, bestFrom, bestTo)
	if l == nil {
		return nil
	}
	// Calls that start as the gate fills end one service time later: skip
	// that first W, or the count of calls ending in the window comes short.
	if w := time.Duration(l.MeanServiceMS * float64(time.Millisecond)); bestTo-bestFrom > 2*w {
		bestFrom += w
		if l2 := littleOver(samples, calls, bestFrom, bestTo); l2 != nil {
			l = l2
		}
	}
	s := &Saturation{SecondsFull: (bestTo - bestFrom).Seconds(), ThroughputRPS: l.ThroughputRPS, MeanServiceMS: l.MeanServiceMS}
	if l.MeanServiceMS > 0 {
		s.BoundRPS = float64(cap) / (l.MeanServiceMS / 1000)
		s.Ratio = s.ThroughputRPS / s.BoundRPS
	}
	return s
}
