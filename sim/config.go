package sim

import (
	"encoding/json"
	"time"
)

// Config sets the simulator's models. The zero value is a fast, permissive
// simulator: no latency, unlimited capacity, no rate limits and no faults,
// which is what most tests want. DefaultConfig gives realistic values.
type Config struct {
	// Seed makes reply text, reply length, jitter, auto tool choice and
	// random faults reproducible. Two servers with the same Seed answer the
	// same request body identically.
	Seed int64

	// TTFT is the time to first token of an uncontended request. Zero means
	// the reply begins at once.
	TTFT time.Duration
	// PrefillPerToken is the prefill time of each input token not read
	// from the prompt cache (input_tokens + cache_creation_input_tokens),
	// added to TTFT: a cache read shortens the time to first token in
	// proportion to the share of the prompt it covers. Zero means prefill
	// costs nothing beyond TTFT.
	PrefillPerToken time.Duration
	// PerToken is the generation time per output token of an uncontended
	// request. Zero means the whole reply is sent at once.
	PerToken time.Duration
	// Jitter varies TTFT and PerToken per request by up to this fraction
	// either way (0.2 means ±20 %), deterministically from Seed and the
	// request. Zero means none.
	Jitter float64

	// Capacity is the number of concurrent generation slots. Beyond it the
	// in-flight requests share the slots (processor sharing): with n > C in
	// flight each progresses at C/n of full speed. Zero means unlimited.
	Capacity int
	// OverloadAt is the number of in-flight requests at which a new request
	// is refused at once with 529 overloaded_error. Zero means never.
	OverloadAt int
	// Spikes multiply latency by Factor while the time since New is within
	// [From, To). Overlapping spikes multiply.
	Spikes []Spike
	// CapacitySteps change Capacity and OverloadAt during a run: from each
	// step's From (since New) until the next step's, its values hold, and
	// before the first step Capacity and OverloadAt do. Steps must be in
	// order of From.
	CapacitySteps []CapacityStep

	// RequestsPerMinute, InputTokensPerMinute and OutputTokensPerMinute are
	// token-bucket rate limits refilled continuously. Zero turns a limit off
	// (and its anthropic-ratelimit-* headers with it).
	RequestsPerMinute     int
	InputTokensPerMinute  int
	OutputTokensPerMinute int
	// BucketsSpent is the share of each of a credential's buckets already
	// spent when the simulator first sees it: 0 starts them full, as a
	// key at rest; 0.9 leaves a tenth, as a key already busy at its
	// limit, so that a run of seconds meets the limit itself rather than
	// the minute's worth a full bucket lets through at once.
	BucketsSpent float64

	// MinCacheTokens, when positive, overrides the minimum cacheable prompt
	// prefix, in tokens, of every non-haiku model. Zero means each model's
	// documented minimum (512 to 4096, see request.CacheMinimum).
	MinCacheTokens int
	// MinCacheTokensHaiku is the same override for haiku models. Zero
	// means the documented minimum (2048 for Haiku 3.5, 4096 for Haiku 4.5).
	MinCacheTokensHaiku int

	// Workspaces put API keys in workspaces whose keys share one prompt
	// cache (and one store of cache diagnostics), as keys of one workspace
	// do on the API. A key in none is a workspace of its own.
	Workspaces []Workspace

	// OutputTokensMin and OutputTokensMax bound the reply length chosen from
	// the request hash (before max_tokens truncation). Zero means 16 and 256.
	// The request header x-sim-output-tokens overrides both.
	OutputTokensMin int
	OutputTokensMax int

	// BatchDuration is how long a whole message batch takes to process;
	// items finish evenly across it. Zero means 2s.
	BatchDuration time.Duration
	// BatchExpiry is how long after creation an unfinished batch expires.
	// Zero means 24h, the API's value.
	BatchExpiry time.Duration

	// FaultRate429, FaultRate500 and FaultRate529 are the fractions of
	// /v1/messages requests answered with that error instead of a reply,
	// chosen deterministically from Seed and the request's arrival number.
	FaultRate429 float64
	FaultRate500 float64
	FaultRate529 float64
	// Outages answer every /v1/messages request that arrives within one's
	// stretch with its error: a backend, or one of its keys, down for a
	// while. See Outage.
	Outages []Outage
	// SlowStreamInterval is the gap between events under the slow-stream
	// fault. Zero means 1s.
	SlowStreamInterval time.Duration

	// ToolUseShare is the share of replies to requests with tools and
	// tool_choice auto (or none) that call a tool, chosen from the request
	// hash: 0.5 when zero, none when negative, every one at 1.
	ToolUseShare float64
	// ToolUseMax, when positive, stops tool calls under tool_choice auto
	// once the conversation holds that many tool_result blocks, so that a
	// real agent's tool loop ends after a known number of turns (with
	// ToolUseShare 1 and ToolUseMax 1: one tool call, then an answer).
	ToolUseMax int
	// ToolUseName, when set and offered in tools, is the tool an auto
	// tool call calls (Claude Code's "Agent" starts a subagent); else the
	// tool is chosen from the request hash. A comma-separated list names
	// one tool per call in turn: the call made when the conversation
	// holds k tool results calls the list's (k mod length)'th, so that a
	// real agent's turns use several tools (Read, Grep, Glob).
	ToolUseName string
	// ToolUseInput, when it holds inputs for the tool a reply calls,
	// gives the call one of them instead of an input drawn from
	// the tool's schema: the (k mod count)'th when the conversation holds
	// k tool results. A drawn input is valid but arbitrary (a Read of a
	// file named "the"); a given one makes a real agent's tool act on
	// what the test chose (a fixture file).
	ToolUseInput map[string][]json.RawMessage

	// RecordDir, when set, is a folder where the simulator writes every
	// API request it receives (method, path, query and headers in
	// NNNN.request.json, the exact body in NNNN.body), at most
	// MaxRecorded of them, with no credential headers: fixtures of what
	// a real client sends.
	RecordDir string

	// BedrockAccessKeyID and BedrockSecretAccessKey are the test
	// credentials the Bedrock paths (/model/{id}/invoke, …) check SigV4
	// signatures against; with no access key id every Bedrock request is
	// refused (403 UnrecognizedClientException).
	BedrockAccessKeyID     string
	BedrockSecretAccessKey string
	// VertexToken is the bearer token the Vertex AI paths
	// (/v1/projects/…/publishers/anthropic/models/…) accept; empty
	// refuses every Vertex request (401 UNAUTHENTICATED).
	VertexToken string
	// FoundryAPIKey is the resource key the Microsoft Foundry paths
	// (/anthropic/v1/messages, …) accept in api-key or x-api-key, and
	// FoundryToken the Microsoft Entra ID bearer token they accept; with
	// neither, every Foundry request is refused (401).
	FoundryAPIKey string
	FoundryToken  string
}

// Test credentials `sluice sim` accepts by default on its cloud paths:
// made-up values, to be given to a client pointed at the simulator.
const (
	DefaultBedrockAccessKeyID     = "AKIASLUICESIMULATOR0"
	DefaultBedrockSecretAccessKey = "sluice-sim-bedrock-secret-access-key"
	DefaultVertexToken            = "sluice-sim-vertex-token"
	DefaultFoundryAPIKey          = "sluice-sim-foundry-api-key"
	DefaultFoundryToken           = "sluice-sim-foundry-entra-token"
)

// CapacityStep is the upstream's capacity from From after the server
// started: Capacity generation slots (0: unlimited) and a 529 from
// OverloadAt requests in flight (0: never).
type CapacityStep struct {
	From       time.Duration
	Capacity   int
	OverloadAt int
}

// Outage answers every /v1/messages request that arrives within [From, To)
// after the server started with Status (429, 500 or 529; 0 means 529) at
// once: only requests whose credential is one of Credentials, each named
// by its short hash (request.Tenant's, as Stats.Credentials names them),
// or every request when Credentials is empty.
type Outage struct {
	From, To    time.Duration
	Status      int
	Credentials []string
}

// Workspace is a named set of API keys, each named by its short hash
// (request.Tenant's, as Stats.Credentials and Outage name them), that
// share one prompt cache.
type Workspace struct {
	Name        string
	Credentials []string
}

// Spike multiplies latency by Factor during [From, To) after the server started.
type Spike struct {
	From, To time.Duration
	Factor   float64
}

// DefaultConfig returns realistic settings for running the simulator as a
// stand-in for the API (the defaults of `sluice sim`).
func DefaultConfig() Config {
	return Config{
		Seed:     1,
		TTFT:     400 * time.Millisecond,
		PerToken: 10 * time.Millisecond,
		// About 8 s more for an uncached 100k-token prompt: the order of
		// the "up to 85 % lower latency for long prompts" the caching
		// announcement gives.
		PrefillPerToken: 80 * time.Microsecond,
		Jitter:          0.1,
		Capacity:        64,
		OverloadAt:      1024,
		// The rest are what the zero value means, spelled out so --help shows them.
		OutputTokensMin:    16,
		OutputTokensMax:    256,
		BatchDuration:      2 * time.Second,
		BatchExpiry:        24 * time.Hour,
		SlowStreamInterval: time.Second,

		BedrockAccessKeyID:     DefaultBedrockAccessKeyID,
		BedrockSecretAccessKey: DefaultBedrockSecretAccessKey,
		VertexToken:            DefaultVertexToken,
		FoundryAPIKey:          DefaultFoundryAPIKey,
		FoundryToken:           DefaultFoundryToken,
	}
}

// withDefaults fills the fields whose zero value stands for a default.
func (c Config) withDefaults() Config {
	if c.OutputTokensMin <= 0 {
		c.OutputTokensMin = 16
	}
	if c.OutputTokensMax <= 0 {
		c.OutputTokensMax = 256
	}
	if c.OutputTokensMax < c.OutputTokensMin {
		c.OutputTokensMax = c.OutputTokensMin
	}
	if c.BatchDuration <= 0 {
		c.BatchDuration = 2 * time.Second
	}
	if c.BatchExpiry <= 0 {
		c.BatchExpiry = 24 * time.Hour
	}
	if c.SlowStreamInterval <= 0 {
		c.SlowStreamInterval = time.Second
	}
	return c
}
