package sim

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// RegisterFlags binds every field of c to a flag in fs, using the current
// values of c as the defaults shown by --help.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed for reply text, lengths, jitter and random faults")
	fs.DurationVar(&c.TTFT, "ttft", c.TTFT, "time to first token of an uncontended request")
	fs.DurationVar(&c.PerToken, "per-token", c.PerToken, "generation time per output token")
	fs.DurationVar(&c.PrefillPerToken, "prefill-per-token", c.PrefillPerToken, "prefill time per input token not read from the cache, added to the time to first token")
	fs.Float64Var(&c.Jitter, "jitter", c.Jitter, "latency jitter as a fraction either way (0.1 = ±10%)")
	fs.IntVar(&c.Capacity, "capacity", c.Capacity, "concurrent generation slots; beyond them requests share speed (0 = unlimited)")
	fs.IntVar(&c.OverloadAt, "overload-at", c.OverloadAt, "in-flight requests at which new ones get 529 overloaded_error (0 = never)")
	fs.Var((*stepList)(&c.CapacitySteps), "capacity-steps", "capacity changes as FROM:CAPACITY[:OVERLOAD_AT][,...] since start, e.g. 20s:8:12,40s:32:48")
	fs.Var((*spikeList)(&c.Spikes), "spikes", "latency spikes as FROM-TO:FACTOR[,...] since start, e.g. 10s-20s:3")
	fs.IntVar(&c.RequestsPerMinute, "rpm", c.RequestsPerMinute, "requests per minute limit (0 = off)")
	fs.IntVar(&c.InputTokensPerMinute, "itpm", c.InputTokensPerMinute, "input tokens per minute limit (0 = off)")
	fs.IntVar(&c.OutputTokensPerMinute, "otpm", c.OutputTokensPerMinute, "output tokens per minute limit (0 = off)")
	fs.IntVar(&c.MinCacheTokens, "min-cache-tokens", c.MinCacheTokens, "minimum cacheable prefix in tokens for non-haiku models (0 = each model's documented minimum)")
	fs.IntVar(&c.MinCacheTokensHaiku, "min-cache-tokens-haiku", c.MinCacheTokensHaiku, "minimum cacheable prefix in tokens for haiku models (0 = each model's documented minimum)")
	fs.Var((*workspaceList)(&c.Workspaces), "workspaces", "API keys that share a prompt cache as NAME=CREDENTIAL_HASH[+HASH...][,...] (default: each key its own workspace)")
	fs.IntVar(&c.OutputTokensMin, "output-tokens-min", c.OutputTokensMin, "shortest reply in tokens before max_tokens (0 = 16)")
	fs.IntVar(&c.OutputTokensMax, "output-tokens-max", c.OutputTokensMax, "longest reply in tokens before max_tokens (0 = 256)")
	fs.DurationVar(&c.BatchDuration, "batch-duration", c.BatchDuration, "time to process a whole message batch (0 = 2s)")
	fs.DurationVar(&c.BatchExpiry, "batch-expiry", c.BatchExpiry, "time after which an unfinished batch expires (0 = 24h)")
	fs.Float64Var(&c.BucketsSpent, "buckets-spent", c.BucketsSpent, "share of each credential's rate-limit buckets spent when it is first seen (0 = full)")
	fs.Var((*outageList)(&c.Outages), "outages", "stretches answered with an error as FROM-TO[:STATUS][@CREDENTIAL_HASH][,...] since start, e.g. 10s-20s:529@3f2a9c1b0d4e5f60")
	fs.Float64Var(&c.FaultRate429, "fault-rate-429", c.FaultRate429, "fraction of messages requests answered 429 rate_limit_error")
	fs.Float64Var(&c.FaultRate500, "fault-rate-500", c.FaultRate500, "fraction of messages requests answered 500 api_error")
	fs.Float64Var(&c.FaultRate529, "fault-rate-529", c.FaultRate529, "fraction of messages requests answered 529 overloaded_error")
	fs.DurationVar(&c.SlowStreamInterval, "slow-stream-interval", c.SlowStreamInterval, "gap between events under the slow-stream fault (0 = 1s)")
	fs.Float64Var(&c.ToolUseShare, "tool-use-share", c.ToolUseShare, "share of tool_choice auto replies that call a tool (0 = 0.5, negative = none, 1 = all)")
	fs.IntVar(&c.ToolUseMax, "tool-use-max", c.ToolUseMax, "no auto tool call once the conversation holds this many tool results (0 = no limit)")
	fs.StringVar(&c.ToolUseName, "tool-use-name", c.ToolUseName, "the tool an auto tool call calls when offered; a comma-separated list, one per call in turn (\"\" = chosen from the request)")
	fs.Var((*toolInputs)(&c.ToolUseInput), "tool-use-input", "NAME=JSON: an input auto tool calls to tool NAME use instead of one drawn from its schema (repeat for more inputs, used in turn)")
	fs.StringVar(&c.RecordDir, "record-dir", c.RecordDir, "write every API request (headers without credentials, exact body) to this folder")
	fs.StringVar(&c.BedrockAccessKeyID, "bedrock-access-key-id", c.BedrockAccessKeyID, "the AWS access key id whose SigV4 signatures the Bedrock paths accept (\"\" = refuse all)")
	fs.StringVar(&c.BedrockSecretAccessKey, "bedrock-secret-access-key", c.BedrockSecretAccessKey, "the secret access key the Bedrock paths check signatures with (a test value, never a real key)")
	fs.StringVar(&c.VertexToken, "vertex-token", c.VertexToken, "the bearer token the Vertex AI paths accept (\"\" = refuse all)")
	fs.StringVar(&c.FoundryAPIKey, "foundry-api-key", c.FoundryAPIKey, "the resource key the Microsoft Foundry paths accept in api-key or x-api-key (\"\" = refuse keys)")
	fs.StringVar(&c.FoundryToken, "foundry-token", c.FoundryToken, "the Microsoft Entra ID bearer token the Foundry paths accept (\"\" = refuse tokens)")
}

// spikeList is the flag.Value form of []Spike: FROM-TO:FACTOR[,...].
type spikeList []Spike

func (l *spikeList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, s := range *l {
		parts[i] = fmt.Sprintf("%s-%s:%g", s.From, s.To, s.Factor)
	}
	return strings.Join(parts, ",")
}

func (l *spikeList) Set(v string) error {
	var out []Spike
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		span, factor, ok := strings.Cut(part, ":")
		from, to, ok2 := strings.Cut(span, "-")
		if !ok || !ok2 {
			return fmt.Errorf("spike %q: want FROM-TO:FACTOR, e.g. 10s-20s:3", part)
		}
		var s Spike
		var err error
		if s.From, err = time.ParseDuration(from); err != nil {
			return fmt.Errorf("spike %q: from: %w", part, err)
		}
		if s.To, err = time.ParseDuration(to); err != nil {
			return fmt.Errorf("spike %q: to: %w", part, err)
		}
		if s.Factor, err = strconv.ParseFloat(factor, 64); err != nil || s.Factor <= 0 {
			return fmt.Errorf("spike %q: factor must be a positive number", part)
		}
		if s.To <= s.From {
			return fmt.Errorf("spike %q: TO must be after FROM", part)
		}
		out = append(out, s)
	}
	*l = out
	return nil
}

// stepList is the flag.Value form of []CapacityStep:
// FROM:CAPACITY[:OVERLOAD_AT][,...].
type stepList []CapacityStep

func (l *stepList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, s := range *l {
		parts[i] = fmt.Sprintf("%s:%d:%d", s.From, s.Capacity, s.OverloadAt)
	}
	return strings.Join(parts, ",")
}

func (l *stepList) Set(v string) error {
	var out []CapacityStep
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, ":")
		if len(f) < 2 || len(f) > 3 {
			return fmt.Errorf("capacity step %q: want FROM:CAPACITY[:OVERLOAD_AT], e.g. 20s:8:12", part)
		}
		var s CapacityStep
		var err error
		if s.From, err = time.ParseDuration(f[0]); err != nil || s.From < 0 {
			return fmt.Errorf("capacity step %q: from: want a duration >= 0", part)
		}
		if s.Capacity, err = strconv.Atoi(f[1]); err != nil || s.Capacity < 0 {
			return fmt.Errorf("capacity step %q: capacity must be a whole number >= 0", part)
		}
		if len(f) == 3 {
			if s.OverloadAt, err = strconv.Atoi(f[2]); err != nil || s.OverloadAt < 0 {
				return fmt.Errorf("capacity step %q: overload-at must be a whole number >= 0", part)
			}
		}
		if len(out) > 0 && s.From < out[len(out)-1].From {
			return fmt.Errorf("capacity step %q: steps must be in order of FROM", part)
		}
		out = append(out, s)
	}
	*l = out
	return nil
}

// outageList is the flag.Value form of []Outage:
// FROM-TO[:STATUS][@HASH[+HASH...]][,...].
type outageList []Outage

func (l *outageList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, o := range *l {
		parts[i] = fmt.Sprintf("%s-%s:%d", o.From, o.To, o.status())
		if len(o.Credentials) > 0 {
			parts[i] += "@" + strings.Join(o.Credentials, "+")
		}
	}
	return strings.Join(parts, ",")
}

func (l *outageList) Set(v string) error {
	var out []Outage
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		var o Outage
		rest, creds, ok := strings.Cut(part, "@")
		if ok {
			o.Credentials = strings.Split(creds, "+")
		}
		span, status, hasStatus := strings.Cut(rest, ":")
		from, to, ok := strings.Cut(span, "-")
		if !ok {
			return fmt.Errorf("outage %q: want FROM-TO[:STATUS][@CREDENTIAL_HASH], e.g. 10s-20s:529", part)
		}
		var err error
		if o.From, err = time.ParseDuration(from); err != nil || o.From < 0 {
			return fmt.Errorf("outage %q: from: want a duration >= 0", part)
		}
		if o.To, err = time.ParseDuration(to); err != nil || o.To <= o.From {
			return fmt.Errorf("outage %q: to: want a duration after from", part)
		}
		if hasStatus {
			if o.Status, err = strconv.Atoi(status); err != nil || !outageStatus[o.Status] {
				return fmt.Errorf("outage %q: status must be 429, 500 or 529", part)
			}
		}
		out = append(out, o)
	}
	*l = out
	return nil
}

// outageStatus are the statuses an outage can answer with.
var outageStatus = map[int]bool{429: true, 500: true, 529: true}

// status is the outage's status, 529 when it names none.
func (o Outage) status() int {
	if outageStatus[o.Status] {
		return o.Status
	}
	return 529
}

// toolInputs is the flag.Value form of ToolUseInput: each NAME=JSON adds
// one input for tool NAME.
type toolInputs map[string][]json.RawMessage

func (m *toolInputs) String() string {
	if m == nil || *m == nil {
		return ""
	}
	var parts []string
	for name, ins := range *m {
		for _, in := range ins {
			parts = append(parts, name+"="+string(in))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func (m *toolInputs) Set(v string) error {
	name, in, ok := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	var obj map[string]any
	if !ok || name == "" || json.Unmarshal([]byte(in), &obj) != nil || obj == nil {
		return fmt.Errorf("tool input %q: want NAME=JSON object, e.g. Read={\"file_path\":\"README.md\"}", v)
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, []byte(in)) // valid: decoded above
	if *m == nil {
		*m = map[string][]json.RawMessage{}
	}
	(*m)[name] = append((*m)[name], json.RawMessage(buf.Bytes()))
	return nil
}

// workspaceList is the flag.Value form of []Workspace:
// NAME=HASH[+HASH...][,...].
type workspaceList []Workspace

func (l *workspaceList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, w := range *l {
		parts[i] = w.Name + "=" + strings.Join(w.Credentials, "+")
	}
	return strings.Join(parts, ",")
}

func (l *workspaceList) Set(v string) error {
	var out []Workspace
	seen := map[string]string{}
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, creds, ok := strings.Cut(part, "=")
		if !ok || name == "" || creds == "" {
			return fmt.Errorf("workspace %q: want NAME=CREDENTIAL_HASH[+HASH...], e.g. team-a=3f2a9c1b0d4e5f60+0123456789abcdef", part)
		}
		w := Workspace{Name: name}
		for _, h := range strings.Split(creds, "+") {
			if other, dup := seen[h]; dup {
				return fmt.Errorf("workspace %q: credential %s is already in workspace %s", part, h, other)
			}
			seen[h] = name
			w.Credentials = append(w.Credentials, h)
		}
		out = append(out, w)
	}
	*l = out
	return nil
}
