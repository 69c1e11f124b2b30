package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/record"
	"github.com/sluicehq/sluice/sim"
)

// The modes a scenario runs through.
const (
	ModeDirect   = "direct"   // the client talks to the upstream, no sluice
	ModePlain    = "plain"    // through sluice with BATCH_ENABLED=0
	ModeWindowed = "windowed" // through sluice with windowing on
	// ModeWindowedFIFO is windowed with GATE_ORDER=fifo: one line for
	// every tenant, the seed's order, against windowed's default fair one.
	ModeWindowedFIFO = "windowed-fifo"
	// ModeBulk sends each request to sluice's bulk endpoint
	// (/v1/bulk/messages, with a store in a temporary DATA_DIR) and
	// long-polls it until it has ended: the same work as a Message Batch,
	// at half the price; its latency is submission to result.
	ModeBulk = "bulk"
)

// Options configure Run.
type Options struct {
	// Scenario is what to run. Required.
	Scenario *Scenario
	// Modes to run, in order. If empty, the scenario's (DefaultModes).
	Modes []string
	// Upstream is the URL of an external simulator (`sluice sim`). If
	// empty, each mode gets a fresh in-process simulator. An external one
	// is reset (POST /sim/reset) before each mode; its spike schedule runs
	// from its own start, and per-request upstream times are not known.
	Upstream string
	// Progress, if set, gets the run's progress: a line updated in place
	// when it is a terminal, else a plain line every ProgressEvery.
	Progress io.Writer
	// ProgressEvery is the plain lines' period. Zero means 5s.
	// Repeat runs every mode this many times, the i-th time (from 0) with
	// the scenario's seed + i, so that a difference between modes can be
	// told from the run-to-run noise. Zero or one means once.
	Repeat        int
	ProgressEvery time.Duration
	// SampleEvery is how often upstream in-flight and queue depth are
	// sampled. Zero means 10ms.
	SampleEvery time.Duration
	// Observer, if set, is asked for an observer to give each mode's proxy
	// (proxy.Options.Observer); it may return nil.
	Observer func(mode string) proxy.Observer
	// Recorder, if set, is asked for a recorder to give each mode's proxy
	// (proxy.Options.Recorder, RECORD_FILE); it may return nil.
	Recorder func(mode string) *record.Recorder
}

// Sample is one reading of the gauges, at T since the run's start.
type Sample struct {
	T                time.Duration
	UpstreamInflight int // requests in generation at the simulator
	Queued           int // sluice's windowed requests waiting (window or slot)
	GateInflight     int // slots held in sluice's gate
	GateCapacity     int // the gate's limit: its slots in all, adaptive or not
	Outstanding      int // client requests not yet ended
	// InputBucket is the in-process simulator's input-token bucket level
	// (sim.Server.InputTokenBucket: the most spent credential's), when
	// ModeResult.InputBucketSize says there is one.
	InputBucket float64
}

// Interval is one upstream call seen by the in-process simulator.
type Interval struct {
	Start, End time.Duration
	Status     int
}

// ModeResult is the raw record of one mode's run.
type ModeResult struct {
	Mode     string
	Windowed bool      // through sluice's window and gate: windowed, or a variant
	Start    time.Time // the run's time zero: every *MS field counts from it
	Cap      int       // BATCH_MAX_CONCURRENCY, when windowed; else 0
	MaxWait  time.Duration
	Records  []Record
	Samples  []Sample
	Upstream []Interval // empty with an external upstream
	Sim      sim.Stats
	// KeyNames name sluice's backend keys (backend/n, as sluice names
	// them) by the short hash the simulator's stats count calls by; nil
	// without backends.
	KeyNames map[string]string
	// InputBucketSize is the simulator's input-token limit a minute, the
	// size of the bucket Samples' InputBucket reads; 0 when there is no
	// such limit or the simulator is external (its bucket is not sampled).
	InputBucketSize int
	// Budgets are the scenario's budgets as sluice had them at the end.
	Budgets []budget.Status
}

// Record is one request, as written to trace.jsonl.
type Record struct {
	Mode         string   `json:"mode"`
	ID           int      `json:"id"`
	Tenant       string   `json:"tenant,omitempty"`  // in a tenants workload
	Session      int      `json:"session,omitempty"` // with turns: the session, and the request's turn in it
	Turn         int      `json:"turn,omitempty"`
	Stream       bool     `json:"stream"`
	PromptTokens int      `json:"prompt_tokens"`
	OutputTokens int      `json:"output_tokens"`
	ArrivalMS    float64  `json:"arrival_ms"`
	SlotMS       *float64 `json:"slot_ms,omitempty"` // start of the last attempt's upstream call
	FirstByteMS  *float64 `json:"first_byte_ms,omitempty"`
	FirstTokenMS *float64 `json:"first_token_ms,omitempty"`
	DoneMS       float64  `json:"done_ms"`
	Outcome      string   `json:"outcome"` // ok, error or lost
	ErrorType    string   `json:"error_type,omitempty"`
	Status       int      `json:"status"`
	Retries      int      `json:"retries"`
	CacheWrite   int      `json:"cache_write_tokens,omitempty"`
	CacheRead    int      `json:"cache_read_tokens,omitempty"`
}

// Run sends the scenario's workload through each mode in turn.
func Run(ctx context.Context, opt Options) (*Report, error) {
	sc := opt.Scenario
	if sc == nil {
		return nil, errors.New("bench: no scenario")
	}
	modes := opt.Modes
	if len(modes) == 0 {
		modes = sc.DefaultModes()
	}
	for _, m := range modes {
		if m != ModeDirect && m != ModePlain && m != ModeBulk && !sc.Windowed(m) {
			want := "direct, plain, windowed or bulk"
			for _, v := range sc.Variants {
				want += ", " + v.Name
			}
			return nil, fmt.Errorf("bench: unknown mode %q (want %s)", m, want)
		}
	}
	n := max(opt.Repeat, 1)
	var rep *Report
	for i := range n {
		// A copy per seed: the seed drives the arrivals, the simulator's
		// jitter and the client's retry jitter alike.
		run := *sc
		run.Seed = sc.Seed + int64(i)
		arrivals, err := run.Arrivals()
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		var results []*ModeResult
		for _, m := range modes {
			label := m
			if n > 1 {
				label = fmt.Sprintf("%s %d/%d", m, i+1, n)
			}
			r, err := runMode(ctx, &run, m, label, arrivals, opt)
			if err != nil {
				return nil, fmt.Errorf("mode %s: %w", label, err)
			}
			results = append(results, r)
		}
		this := newReport(&run, results)
		if rep == nil {
			rep = this
		}
		if n > 1 {
			rep.Repeats = append(rep.Repeats, RunReport{Seed: run.Seed, Arrivals: this.Arrivals, Modes: this.Modes})
		}
	}
	rep.summarize()
	return rep, nil
}
