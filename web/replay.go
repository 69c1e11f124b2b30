package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"time"
)

// Params are what the page asks the server to run: one burst through the
// plain and the windowed path, against an in-process simulator.
type Params struct {
	Burst          int     `json:"burst"`           // requests, all arriving at once
	MaxSize        int     `json:"max_size"`        // BATCH_MAX_SIZE
	MaxWaitMS      int     `json:"max_wait_ms"`     // BATCH_MAX_WAIT_MS
	MaxConcurrency int     `json:"max_concurrency"` // BATCH_MAX_CONCURRENCY
	LatencyMS      int     `json:"latency_ms"`      // the upstream's time to first token
	Capacity       int     `json:"capacity"`        // the upstream's generation slots; 0 = unlimited
	SpikeFactor    float64 `json:"spike_factor"`    // latency multiplier during the spike; 0 or 1 = none
	SpikeFromMS    int     `json:"spike_from_ms"`
	SpikeToMS      int     `json:"spike_to_ms"`
}

// DefaultParams are a burst of 64 at once with the seed's window and cap, 300
// ms to first token, against an upstream with 8 generation slots: the cap set
// to what the upstream can really run at once, as it should be. Beyond its
// slots the upstream slows every call down (processor sharing), so the plain
// lane's calls all finish late together while the windowed lane's finish in
// waves. (The bench's burst scenario uses 16 slots, where the cap of 8 is
// too low; the page's Capacity field shows that case too.)
var DefaultParams = Params{Burst: 64, MaxSize: 16, MaxWaitMS: 20, MaxConcurrency: 8, LatencyMS: 300, Capacity: 8}

// Limits on what the page may ask for.
const (
	maxBurst   = 500
	maxLatency = 5000             // ms
	maxEstRun  = 25 * time.Second // a run estimated longer is refused up front
)

// Fixed parts of a page run: short replies, no client retries (so each dot
// is one call), half of them streamed, and at most RunLimit long.
const (
	RunPerToken        = 2 * time.Millisecond
	RunOutputTokensMax = 48
	RunLimit           = 30 * time.Second
)

// Validate checks p against the limits; the message names the field.
func (p Params) Validate() error {
	check := func(name string, v, lo, hi int) error {
		if v < lo || v > hi {
			return fmt.Errorf("%s=%d: must be between %d and %d", name, v, lo, hi)
		}
		return nil
	}
	for _, err := range []error{
		check("burst", p.Burst, 1, maxBurst),
		check("max_size", p.MaxSize, 1, maxBurst),
		check("max_wait_ms", p.MaxWaitMS, 0, 5000),
		check("max_concurrency", p.MaxConcurrency, 1, maxBurst),
		check("latency_ms", p.LatencyMS, 1, maxLatency),
		check("capacity", p.Capacity, 0, 10000),
	} {
		if err != nil {
			return err
		}
	}
	if p.SpikeFactor != 0 && p.SpikeFactor != 1 {
		if p.SpikeFactor < 0 || p.SpikeFactor > 20 || math.IsNaN(p.SpikeFactor) {
			return fmt.Errorf("spike_factor=%g: must be between 0 and 20 (0 or 1: no spike)", p.SpikeFactor)
		}
		if p.SpikeFromMS < 0 || p.SpikeToMS <= p.SpikeFromMS || p.SpikeToMS > int(RunLimit/time.Millisecond) {
			return fmt.Errorf("spike_from_ms=%d, spike_to_ms=%d: want 0 <= from < to <= 30000", p.SpikeFromMS, p.SpikeToMS)
		}
	}
	if est := p.estimate(); est > maxEstRun {
		return fmt.Errorf("this run would take about %s, over the page's limit of %s: lower burst or latency_ms, or raise max_concurrency", est.Round(time.Second), maxEstRun)
	}
	return nil
}

// estimate is a rough upper bound of the slower path's duration.
func (p Params) estimate() time.Duration {
	f := max(p.SpikeFactor, 1)
	call := time.Duration(float64(p.LatencyMS)*f)*time.Millisecond + RunOutputTokensMax*RunPerToken
	waves := (p.Burst + p.MaxConcurrency - 1) / p.MaxConcurrency
	windowed := time.Duration(waves)*call + time.Duration(p.MaxWaitMS)*time.Millisecond
	plain := call
	if p.Capacity > 0 && p.Burst > p.Capacity {
		plain = call * time.Duration(p.Burst) / time.Duration(p.Capacity)
	}
	if p.Capacity > 0 && p.MaxConcurrency > p.Capacity {
		windowed = windowed * time.Duration(p.MaxConcurrency) / time.Duration(p.Capacity)
	}
	return max(windowed, plain)
}

// Trace is what the page replays: one lane per path.
type Trace struct {
	Params    Params    `json:"params"`
	Generated time.Time `json:"generated"`
	// Verdict is the suite's latency verdict line for the run
	// (bench.VerdictOf), windowed against plain.
	Verdict string `json:"verdict,omitempty"`
	Lanes   []Lane `json:"lanes"`
}

// Lane is one path's run. Every time is in milliseconds since the burst's
// time zero; a null time is a step the request never reached.
type Lane struct {
	Mode     string    `json:"mode"` // plain or windowed
	Cap      int       `json:"cap"`  // BATCH_MAX_CONCURRENCY (enforced only when windowed)
	Requests []Request `json:"requests"`
	Waves    []Wave    `json:"waves"`
	// UpstreamPeak is the simulator's own exact count of concurrent
	// generations, for comparison with the lane's slot intervals.
	UpstreamPeak int `json:"upstream_peak"`
}

// Request is one request's life.
type Request struct {
	ID      int      `json:"id"`
	Arrive  float64  `json:"arrive"`  // the client sent it
	Flush   *float64 `json:"flush"`   // its window closed (windowed only)
	Wave    uint64   `json:"wave"`    // its wave (windowed only)
	Slot    *float64 `json:"slot"`    // its upstream call could begin
	Release *float64 `json:"release"` // its upstream call ended and its slot was freed
	Done    float64  `json:"done"`    // the client had the whole answer
	Outcome string   `json:"outcome"` // ok, error or lost
	Status  int      `json:"status"`
	Error   string   `json:"error,omitempty"`
	Stream  bool     `json:"stream"`
}

// Wave is one flush of the window.
type Wave struct {
	ID     uint64  `json:"id"`
	At     float64 `json:"at"`
	Size   int     `json:"size"`
	Reason string  `json:"reason"`
}

// runner serves POST /ui/api/run, one run at a time.
type runner struct {
	busy chan struct{}
	log  *slog.Logger
	run  func(context.Context, Params) (*Trace, error) // Options.Run
}

func newRunner(log *slog.Logger, run func(context.Context, Params) (*Trace, error)) *runner {
	return &runner{busy: make(chan struct{}, 1), log: log, run: run}
}

func (rn *runner) serve(w http.ResponseWriter, r *http.Request) {
	// application/json, and only that: a cross-site request can send no
	// Content-Type, or text/plain, without a CORS preflight (which sluice
	// does not grant), so that any page the operator opens could start
	// runs.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "invalid_request_error", "send the parameters as application/json")
		return
	}
	p := DefaultParams
	dec := json.NewDecoder(io.LimitReader(r.Body, 4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the parameters are not valid JSON: "+err.Error())
		return
	}
	if err := p.Validate(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	select {
	case rn.busy <- struct{}{}:
		defer func() { <-rn.busy }()
	default:
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "a run is already in progress; the page runs one at a time. Try again when it finishes")
		return
	}
	tr, err := rn.run(r.Context(), p)
	if err != nil {
		if r.Context().Err() != nil {
			return // the page went away
		}
		rn.log.Warn("ui run failed", "err", err)
		writeError(w, http.StatusInternalServerError, "api_error", "the run failed: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(tr)
}
