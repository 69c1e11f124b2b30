package gate

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Adaptive is a Limit that learns how many calls the upstream can carry at
// once, between a floor and a ceiling, from how each slot's use went. It
// combines two rules:
//
//   - A gradient on the time to first token, in the manner of Netflix's
//     Gradient2 and Envoy's adaptive concurrency filter: the ratio of a
//     long-term average to a short-term one says whether calls queue
//     upstream (a ratio below 1) or not, and each sample moves the limit
//     towards limit × ratio plus a small queue allowance, so that it grows
//     while the first token comes as fast as it used to and shrinks when
//     it slows.
//   - A multiplicative decrease on overload (529, another 5xx, no answer):
//     the limit is cut by a quarter, once per round of calls, since every
//     call sent before a cut would fail the same way and says nothing new.
//
// Why the first token and not the call's whole time: an LLM call lasts as
// long as its answer, which is the client's to choose (max_tokens) and the
// model's to decide, so a gradient on whole latency reads a long answer
// as congestion and a run of short ones as spare capacity. The time to
// first token is the queueing and prefill the upstream adds before it
// starts writing, the same for a 20-token answer as for a 4,000-token one;
// an overloaded upstream shows it first. A non-streaming answer arrives
// whole, so it has no first token to time: it feeds only the overload rule
// and a slow additive growth (one slot per limit's worth of successes
// while the limit is in use), so that a workload without streams still
// finds its way up after a cut. The first token still grows with a
// prompt's uncached length (prefill); the long-term average and the clamp
// of the ratio to [0.5, 1] keep one long prompt from moving the limit far.
//
// The limit starts at the floor and probes up, a slot per answer, until
// the first sign of congestion (a first token 10 % slower than the
// baseline, or an overload): the baseline is then an unloaded upstream's,
// which a limit started at a ceiling above the capacity would never see.
// It never goes past the ceiling, which it reads at
// every Slots (a ceiling may itself change: a limit leased from
// elsewhere), nor below the floor, so that a line never starves.
type Adaptive struct {
	floor    int
	ceiling  Limit
	onChange func(slots int)

	slots atomic.Int64 // the learned limit as a whole number; math.MaxInt64: not yet below the ceiling

	mu      sync.Mutex
	limit   float64   // the learned limit; +Inf until the first sample
	short   float64   // short-term average time to first token, seconds
	long    float64   // long-term average of the same
	samples int       // first-token samples taken
	lastCut time.Time // when overload last cut the limit
	probing bool      // no congestion seen yet: grow a slot per answer
}

// AdaptiveConfig configures NewAdaptive.
type AdaptiveConfig struct {
	// Ceiling is the most slots the limit allows (BATCH_MAX_CONCURRENCY).
	// Required.
	Ceiling Limit
	// Floor is the fewest slots the limit allows. Below 1 it is 1; above
	// the ceiling, the ceiling wins.
	Floor int
	// StartAtCeiling starts the limit at the ceiling, the static cap's
	// behaviour until the upstream says otherwise, instead of at the floor.
	// From the floor it probes up a slot per answer until the first sign
	// of congestion, so that its baseline first token is an unloaded
	// upstream's; from the ceiling, its baseline is whatever load the
	// first calls met, and a ceiling above the capacity makes that a
	// loaded one.
	StartAtCeiling bool
	// OnChange, if set, is called with the limit's slots each time
	// learning changes them. It is called under the gate's lock, so it
	// must be quick (a metric's Set, say) and must not call the gate.
	OnChange func(slots int)
}

// The gradient's constants. Gradient2's defaults are a smoothing of 0.2
// and a long window of 600 samples; sluice sees far fewer calls a second
// than an RPC server, so its long window is shorter, and its short
// average smooths a few samples because a single first token varies with
// its prompt's length.
const (
	adaptiveSmoothing  = 0.2       // how far each sample moves the limit towards its new estimate
	adaptiveShortAlpha = 0.3       // weight of a sample in the short-term average (about 3 samples)
	adaptiveLongRise   = 1.0 / 512 // weight of a slower sample in the long-term average
	adaptiveLongFall   = 1.0 / 64  // weight of a faster one
	adaptiveTolerance  = 1.1       // first tokens this much slower than the baseline are not yet queueing: one call's jitter
	adaptiveMinRatio   = 0.5       // the gradient's floor: one slow sample halves nothing
	adaptiveDrift      = 2.0       // a long-term average this many times the short one is stale
	adaptiveCut        = 0.75      // what overload leaves of the limit
	adaptiveGrowth     = 2.0       // slots a round of unqueued answers adds, times the limit's square root
	adaptiveQueue      = 1.0       // calls beyond the capacity the gradient lets wait upstream
	adaptiveProbeEnd   = 0.9       // while probing, a first token this much slower than the baseline ends it
)

var (
	_ Limit   = (*Adaptive)(nil)
	_ Learner = (*Adaptive)(nil)
	_ Raiser  = (*Adaptive)(nil)
)

// NewAdaptive returns an adaptive limit, at its ceiling until it learns.
func NewAdaptive(c AdaptiveConfig) (*Adaptive, error) {
	if c.Ceiling == nil || c.Ceiling.Slots() < 1 {
		return nil, ErrBadCapacity
	}
	a := &Adaptive{floor: max(c.Floor, 1), ceiling: c.Ceiling, onChange: c.OnChange, probing: true}
	a.limit = float64(a.floor)
	a.slots.Store(int64(a.floor))
	if c.StartAtCeiling {
		a.limit = math.Inf(1) // whatever the ceiling is when it first learns
		a.slots.Store(math.MaxInt64)
	}
	return a, nil
}

// Slots is the learned limit, within the floor and the ceiling now.
func (a *Adaptive) Slots() int {
	return a.clamp(a.slots.Load())
}

// clamp bounds n by the floor and the ceiling's slots now.
func (a *Adaptive) clamp(n int64) int {
	ceiling := a.ceiling.Slots()
	return int(max(min(n, int64(ceiling)), int64(min(a.floor, ceiling))))
}

// OnRaise passes the gate's callback on to a ceiling that can rise on its
// own; the adaptive limit itself rises only in Observe, after which the
// gate grants anyway.
func (a *Adaptive) OnRaise(raised func()) {
	if r, ok := a.ceiling.(Raiser); ok {
		r.OnRaise(raised)
	}
}

// Observe learns from one slot's use, and passes it on to a ceiling that
// learns too.
func (a *Adaptive) Observe(o Outcome) {
	if l, ok := a.ceiling.(Learner); ok {
		l.Observe(o)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	before := a.Slots()
	switch {
	case o.End == EndOverloaded:
		a.overloaded(o)
	case o.End == EndOK && o.FirstToken > 0:
		a.firstToken(o)
	case o.End == EndOK:
		a.succeeded(o)
	default:
		// A 429 is the rate limit's business, not the upstream's
		// capacity; a client that left or a wave deadline (which counts
		// the time in sluice's own line too) says nothing of it either.
		return
	}
	a.slots.Store(int64(a.limit))
	if after := a.Slots(); after != before && a.onChange != nil {
		a.onChange(after)
	}
}

// current is the learned limit within the floor and ceiling now, the
// value every rule starts from (the ceiling before the first sample, or
// after the ceiling fell below it). a.mu is held.
func (a *Adaptive) current() float64 {
	ceiling := float64(a.ceiling.Slots())
	return max(min(a.limit, ceiling), float64(min(a.floor, int(ceiling))))
}

// overloaded cuts the limit, unless the call was sent before the last
// cut: those were sent under the old limit, and their failures were
// already counted.
func (a *Adaptive) overloaded(o Outcome) {
	now := time.Now()
	if now.Add(-o.Held).Before(a.lastCut) {
		a.limit = a.current()
		return
	}
	a.limit = max(a.current()*adaptiveCut, float64(a.floor))
	a.lastCut = now
	a.probing = false
}

// firstToken takes one time-to-first-token sample into the gradient.
func (a *Adaptive) firstToken(o Outcome) {
	x := o.FirstToken.Seconds()
	if a.samples == 0 {
		a.short, a.long = x, x
	}
	a.samples++
	a.short += (x - a.short) * adaptiveShortAlpha
	rate := adaptiveLongRise
	if x < a.long {
		rate = adaptiveLongFall
	}
	a.long += (x - a.long) * rate
	if a.long > adaptiveDrift*a.short {
		// The first token is far faster than it used to be (the upstream
		// recovered from a long overload): let the baseline catch up
		// sooner than its average would.
		a.long *= 0.9
	}
	limit := a.current()
	ratio := adaptiveTolerance * a.long / a.short
	switch {
	case !inUse(o, limit):
	case a.probing && ratio >= adaptiveProbeEnd:
		limit++
	case ratio >= 1:
		// No queueing: grow by twice the square root of the limit per
		// round of answers (a limit's worth), so that a small limit finds
		// a larger capacity in a few rounds and a large one does not
		// overshoot by much in the time its first tokens take to show it.
		limit += adaptiveGrowth / math.Sqrt(limit)
	default:
		a.probing = false
		estimate := limit*max(adaptiveMinRatio, ratio) + adaptiveQueue
		limit += (estimate - limit) * adaptiveSmoothing
	}
	a.limit = max(limit, float64(a.floor))
}

// succeeded grows the limit by one slot per limit's worth of answers that
// had no first token to time, while the limit is in use.
func (a *Adaptive) succeeded(o Outcome) {
	limit := a.current()
	switch {
	case !inUse(o, limit):
	case a.probing:
		limit++
	default:
		limit += 1 / limit
	}
	a.limit = limit
}

// inUse reports whether the slots were in use when o's slot was given
// back: at least half of them held. Below that, the demand, not the
// upstream, set how the calls went, and a low demand must not grow the
// limit for a burst to find later.
func inUse(o Outcome, limit float64) bool { return float64(o.InFlight) >= limit/2 }
