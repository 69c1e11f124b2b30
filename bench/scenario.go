package bench

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

//go:embed scenarios/*.json
var builtin embed.FS

// Scenario is one benchmark: the simulated upstream, sluice's window and
// gate, the client's behaviour and the workload. It is read from JSON; every
// duration is a string such as "20ms" or "1.5s".
type Scenario struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Seed        int64    `json:"seed"`
	Sim         SimSpec  `json:"sim"`
	Sluice      Sluice   `json:"sluice"`
	Client      Client   `json:"client"`
	Workload    Workload `json:"workload"`
	// Variants are windowed modes of their own, each named (the name is
	// its mode, for --modes) with settings over the scenario's sluice
	// ones: to run, say, static caps of 8 and 32 against an adaptive
	// limit side by side.
	Variants []Variant `json:"variants"`
	// Modes are the modes the scenario compares, run when none are asked
	// for (--modes) and by the suite. Empty means plain then windowed.
	Modes []string `json:"modes"`
	// Verdict names what the scenario's one verdict line is about: latency
	// (the default), overload, cache, ratelimit, tenants, capacity, bulk,
	// keypool or failover (see verdictKinds).
	Verdict string `json:"verdict"`
	// Alone names a companion scenario, the same workload without the
	// others, and the tenant whose latency the two compare: the suite runs
	// it too, and the verdict puts the tenant's p99 beside its p99 alone.
	Alone *Alone `json:"alone"`

	dir fs.FS // where a trace file named by Workload.Trace is looked up
	// arrivals, when set, are the workload (a replay's, see replay.go).
	arrivals []Arrival
}

// Variant is a windowed mode with settings of its own: its Sluice's
// non-zero fields override the scenario's.
type Variant struct {
	Name   string `json:"name"`
	Sluice Sluice `json:"sluice"`
}

// Alone is a scenario's companion run without the other tenants.
type Alone struct {
	Scenario string `json:"scenario"`
	Tenant   string `json:"tenant"`
}

// SimSpec is the part of sim.Config a scenario sets.
type SimSpec struct {
	TTFT            Duration    `json:"ttft"`
	PerToken        Duration    `json:"per_token"`
	PrefillPerToken Duration    `json:"prefill_per_token"`
	Jitter          float64     `json:"jitter"`
	Capacity        int         `json:"capacity"`
	OverloadAt      int         `json:"overload_at"`
	Spikes          []SpikeSpec `json:"spikes"`
	// CapacitySteps change capacity and overload_at during the run; the
	// report gives each stretch between them its own figures (phases).
	CapacitySteps         []CapacityStepSpec `json:"capacity_steps"`
	RequestsPerMinute     int                `json:"requests_per_minute"`
	InputTokensPerMinute  int                `json:"input_tokens_per_minute"`
	OutputTokensPerMinute int                `json:"output_tokens_per_minute"`
	// BatchDuration is how long the simulator takes over a whole message
	// batch (mode bulk). Zero keeps the simulator's 2 s.
	BatchDuration Duration `json:"batch_duration"`
	// BucketsSpent is the share of each key's rate-limit buckets spent
	// when the run starts (sim.Config.BucketsSpent): a key already busy
	// at its limit, so that a run of seconds meets the limit itself.
	BucketsSpent float64 `json:"buckets_spent"`
	// Outages are stretches in which a backend's keys (or every key) are
	// answered with an error (sim.Config.Outages).
	Outages []OutageSpec `json:"outages"`
	// OutputTokensMax bounds the reply parts the request does not pin,
	// such as an adaptive thinking block (sim.Config.OutputTokensMax);
	// zero keeps the simulator's 256.
	OutputTokensMax int `json:"output_tokens_max"`
}

// CapacityStepSpec is the upstream's capacity from From on.
type CapacityStepSpec struct {
	From       Duration `json:"from"`
	Capacity   int      `json:"capacity"`
	OverloadAt int      `json:"overload_at"`
}

// SpikeSpec multiplies upstream latency by Factor during [From, To) of a run.
type SpikeSpec struct {
	From   Duration `json:"from"`
	To     Duration `json:"to"`
	Factor float64  `json:"factor"`
}

// Sluice overrides the windowed mode's settings; a zero field keeps the
// seed's default (BATCH_MAX_SIZE=16, BATCH_MAX_WAIT_MS=20,
// BATCH_MAX_CONCURRENCY=8, BATCH_TIMEOUT_S=60).
type Sluice struct {
	MaxSize        int      `json:"max_size"`
	MaxWait        Duration `json:"max_wait"`
	MaxConcurrency int      `json:"max_concurrency"`
	Timeout        Duration `json:"timeout"`
	// IdleRelease overrides BATCH_IDLE_RELEASE (default on); nil keeps it.
	IdleRelease *bool `json:"idle_release"`
	// RateLimitPacing overrides RATE_LIMIT_PACING (buckets, reset or
	// off); empty keeps the default.
	RateLimitPacing string `json:"rate_limit_pacing"`
	// Limit overrides GATE_LIMIT (static or adaptive), LimitFloor
	// GATE_LIMIT_FLOOR; max_concurrency is the adaptive limit's ceiling.
	Limit      string `json:"limit"`
	LimitFloor int    `json:"limit_floor"`
	// BulkMaxWait and BulkPoll override BULK_MAX_WAIT_S and BULK_POLL_MS
	// for mode bulk; zero keeps the defaults.
	BulkMaxWait Duration `json:"bulk_max_wait"`
	BulkPoll    Duration `json:"bulk_poll"`
	// Backends, when set, are the config file's [[backends]]
	// (routing.go): sluice holds their keys and routes each request to
	// one. RoutePolicy overrides ROUTE_POLICY (affinity or round-robin).
	Backends    []BackendSpec `json:"backends"`
	RoutePolicy string        `json:"route_policy"`
	// Budgets are spend budgets on tenants of a tenants workload, each a
	// day's USD (the config file's [[budgets]]; see docs/spend.md).
	Budgets []BudgetSpec `json:"budgets"`
}

// BudgetSpec is a day's budget in USD on one tenant of the workload.
type BudgetSpec struct {
	Tenant string  `json:"tenant"`
	USD    float64 `json:"usd"`
}

// Client is how the load generator behaves, modelled on the official SDKs.
type Client struct {
	// Timeout bounds one attempt, as the SDKs' timeout does. Zero means 60s.
	Timeout Duration `json:"timeout"`
	// MaxRetries is how many times a failed attempt is retried. Nil means 2,
	// the SDKs' default; 0 turns retries off.
	MaxRetries *int `json:"max_retries"`
}

// Workload is when requests arrive and what they look like.
type Workload struct {
	// Kind is burst (N at once, or spread evenly over duration when it is
	// set), poisson (rate for duration), steps
	// (Poisson at each step's rate in turn), ramp (Poisson whose rate goes
	// linearly from from_rate to rate over duration), trace (replay of
	// the arrival times in a JSONL file) or tenants (several tenants'
	// bursts and streams at once, see Tenants).
	Kind     string   `json:"kind"`
	N        int      `json:"n"`
	Rate     float64  `json:"rate"`
	FromRate float64  `json:"from_rate"`
	Duration Duration `json:"duration"`
	Steps    []Step   `json:"steps"`
	// Trace is a JSONL file, one arrival a line with at_ms (or arrival_ms,
	// so a trace.jsonl written by a run can be replayed; only its first
	// mode is used) and optionally stream, prompt_tokens, output_tokens.
	// A relative path is relative to the scenario file.
	Trace string `json:"trace"`

	// StreamFraction is the share of requests sent with stream: true.
	StreamFraction float64 `json:"stream_fraction"`
	// PromptTokens and OutputTokens are [min, max] ranges drawn uniformly
	// per request. Zero means [200, 2000] and [32, 128].
	PromptTokens [2]int `json:"prompt_tokens"`
	OutputTokens [2]int `json:"output_tokens"`
	// Model is the model named in every request. Empty means claude-sonnet-4-5.
	Model string `json:"model"`
	// SharedPrefixTokens, when positive, gives every request the same
	// system prompt of about this many tokens, marked for caching
	// (cache_control ephemeral), before its own message of PromptTokens:
	// the shape of agents started together on one large prompt.
	SharedPrefixTokens int `json:"shared_prefix_tokens"`
	// SharedTools, with SharedPrefixTokens, makes that many of the shared
	// prefix's tokens tool definitions (400 tokens each, sent before the
	// system prompt, as tools come first in the cached prefix), the shape
	// of coding agents: a dozen tools and a large system prompt.
	SharedTools int `json:"shared_tools"`
	// PrefixPerSession, with SharedPrefixTokens and Turns, makes that
	// system prompt each session's own (a text of its own of the same
	// size) instead of one for every request: an agent's own context, its
	// files and its task, cached for its turns and shared with no other
	// session, so that where a session's turns go decides whether they
	// read it.
	PrefixPerSession bool `json:"prefix_per_session"`
	// Tenants, for kind tenants, are several tenants' workloads run at
	// once, each its own kind (burst or poisson), with its own API key.
	Tenants []TenantWorkload `json:"tenants"`
	// Turns, when above 1, makes each arrival a session of this many
	// requests, each sent once the one before has ended: every turn
	// repeats the session's earlier messages (with a stand-in reply for
	// each) and adds a new user message, the last block marked for caching,
	// as coding agents send it. Each turn draws its own prompt and output
	// lengths.
	Turns int `json:"turns"`
	// Shape, when "claude-code", gives every request the shape of a real
	// Claude Code 2.1.332 request (see claudecode.go) instead of the
	// synthetic one: its 12 tools, an attribution line, an identity line
	// and a main prompt in system, a user turn and a system-role turn,
	// max_tokens 128000; with turns, each later turn adds the assistant's
	// tool call and its result. prompt_tokens sizes each tool result;
	// shared_prefix_tokens and shared_tools do not apply.
	Shape string `json:"shape"`
}

// TenantWorkload is one tenant's part of a tenants workload: a burst or
// a Poisson stream, from Start on; its token ranges default to the
// workload's.
type TenantWorkload struct {
	Name         string   `json:"name"`
	Kind         string   `json:"kind"`
	N            int      `json:"n"`
	Rate         float64  `json:"rate"`
	Duration     Duration `json:"duration"`
	Start        Duration `json:"start"`
	PromptTokens [2]int   `json:"prompt_tokens"`
	OutputTokens [2]int   `json:"output_tokens"`
}

// Step is one stretch of a steps workload.
type Step struct {
	Duration Duration `json:"duration"`
	Rate     float64  `json:"rate"`
}

// Duration is a time.Duration read from a string such as "250ms".
type Duration time.Duration

// UnmarshalJSON reads "1.5s" style strings.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"250ms\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration string such as \"250ms\": %w", err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the string form.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Builtin lists the names of the scenarios embedded in the binary.
func Builtin() []string {
	entries, _ := fs.ReadDir(builtin, "scenarios")
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// LoadScenario returns the built-in scenario called nameOrFile, or else
// reads the file of that name.
func LoadScenario(nameOrFile string) (*Scenario, error) {
	sub, _ := fs.Sub(builtin, "scenarios")
	if b, err := fs.ReadFile(sub, nameOrFile+".json"); err == nil {
		return ParseScenario(b, nameOrFile, sub)
	}
	b, err := os.ReadFile(nameOrFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("scenario %q: neither a built-in (%s) nor a file", nameOrFile, strings.Join(Builtin(), ", "))
		}
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return ParseScenario(b, nameOrFile, os.DirFS(filepath.Dir(nameOrFile)))
}

// ParseScenario decodes and validates a scenario. source names it in
// errors; dir is where a relative trace file is found (nil: the current
// directory).
func ParseScenario(b []byte, source string, dir fs.FS) (*Scenario, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var sc Scenario
	if err := dec.Decode(&sc); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
			return nil, fmt.Errorf("scenario %s: line %d: %w", source, line, err)
		}
		return nil, fmt.Errorf("scenario %s: %w", source, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("scenario %s: trailing data after the JSON object", source)
	}
	if dir == nil {
		dir = os.DirFS(".")
	}
	sc.dir = dir
	if sc.Name == "" {
		sc.Name = strings.TrimSuffix(filepath.Base(source), ".json")
	}
	if err := sc.validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", source, err)
	}
	return &sc, nil
}

// DefaultModes are the modes the scenario compares: its own list, or
// plain then windowed.
func (sc *Scenario) DefaultModes() []string {
	if len(sc.Modes) > 0 {
		return slices.Clone(sc.Modes)
	}
	return []string{ModePlain, ModeWindowed}
}

// Variant returns the variant called mode, or nil.
func (sc *Scenario) Variant(mode string) *Variant {
	for i := range sc.Variants {
		if sc.Variants[i].Name == mode {
			return &sc.Variants[i]
		}
	}
	return nil
}
