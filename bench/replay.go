package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/record"
)

// ReplayOptions shape a replay of a recording (`sluice bench --replay`).
type ReplayOptions struct {
	// Speed divides the recorded gaps between arrivals: 10 replays an
	// hour in six minutes. Zero means 1.
	Speed float64
	// Sim is the simulated upstream: its latencies, capacity and rate
	// limits. A rate limit below zero is taken from the recording (the
	// anthropic-ratelimit-*-limit values its answers carried, the lowest
	// over its keys, times Speed so that the traffic meets them as it
	// did); zero is no limit.
	Sim SimSpec
}

// DefaultReplaySim is the simulated upstream a replay runs against
// unless told otherwise: shared-prefix's latencies, unlimited capacity,
// and the recording's own rate limits.
var DefaultReplaySim = SimSpec{TTFT: Duration(300 * time.Millisecond), PerToken: Duration(5 * time.Millisecond),
	PrefillPerToken: Duration(80 * time.Microsecond), Jitter: 0.1,
	RequestsPerMinute: -1, InputTokensPerMinute: -1, OutputTokensPerMinute: -1}

// ReplayScenario is a scenario whose workload is the recording's
// requests, rebuilt with the same structure (see replayBody) and sent at
// the recorded arrival times, through plain and windowed, for the replay
// verdict.
func ReplayScenario(rec *record.Recording, o ReplayOptions) (*Scenario, error) {
	if len(rec.Requests) == 0 {
		return nil, errors.New("replay: the recording holds no requests")
	}
	speed := o.Speed
	if speed == 0 {
		speed = 1
	}
	if speed < 0 {
		return nil, errors.New("replay: --speed must be positive")
	}
	sc := &Scenario{Name: "replay", Seed: 1, Sim: o.Sim, Verdict: "replay", Modes: []string{ModePlain, ModeWindowed},
		Client:   Client{Timeout: Duration(10 * time.Minute)}, // the SDKs' default timeout
		Workload: Workload{Kind: "trace", Trace: "recording " + rec.Header.ID}}
	limits := recordedLimits(rec)
	for _, l := range []struct {
		to       *int
		recorded int
	}{{&sc.Sim.RequestsPerMinute, limits.Requests}, {&sc.Sim.InputTokensPerMinute, limits.InputTokens}, {&sc.Sim.OutputTokensPerMinute, limits.OutputTokens}} {
		if *l.to < 0 {
			*l.to = int(float64(l.recorded) * speed)
		}
	}
	sc.Description = fmt.Sprintf("%d recorded requests (recording %s) at %gx their speed", len(rec.Requests), rec.Header.ID, speed)
	if err := sc.validate(); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	t0 := rec.Requests[0].T
	sc.arrivals = make([]Arrival, len(rec.Requests))
	for i, r := range rec.Requests {
		out := 64
		if r.Usage != nil && r.Usage.Output > 0 {
			out = int(r.Usage.Output)
		}
		tenant := r.Key
		if tenant == "" {
			tenant = r.Tenant
		}
		body := replayBody(&r)
		sc.arrivals[i] = Arrival{At: time.Duration(float64(r.T.Sub(t0)) / speed), Stream: r.Stream, OutputTokens: out,
			PromptTokens: promptTokens(&r), Tenant: tenant, Body: string(body)}
	}
	return sc, nil
}

// recordedLimits is the lowest of each anthropic-ratelimit-*-limit value
// over the recording's keys, each key's latest.
func recordedLimits(rec *record.Recording) record.Limits {
	byKey := map[string]record.Limits{}
	for _, r := range rec.Requests {
		if r.Limits != nil {
			byKey[r.Key] = *r.Limits
		}
	}
	var out record.Limits
	low := func(to *int, v int) {
		if v > 0 && (*to == 0 || v < *to) {
			*to = v
		}
	}
	for _, l := range byKey {
		low(&out.Requests, l.Requests)
		low(&out.InputTokens, l.InputTokens)
		low(&out.OutputTokens, l.OutputTokens)
		low(&out.Tokens, l.Tokens)
	}
	return out
}

func promptTokens(r *record.Request) int {
	n := 0
	for _, b := range r.Blocks {
		n += b.Tokens
	}
	return n
}

// replayBody is a Messages body of r's structure: the same model, stream
// flag and max_tokens; the same tools, system blocks and messages' blocks
// in the same order, each of the recorded tokens (by the estimate sluice
// and the simulator share, about four characters a token) with the same
// cache_control; and blocks that hashed alike in the recording are the
// same text, blocks that did not are different. Every content block is a
// text block, every tool a tool of one free-text description: the
// simulator caches and counts by bytes, not by kind. An attribution line
// stays one, so that whatever matches it (its prefix) still does.
func replayBody(r *record.Request) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":`)
	model, _ := json.Marshal(r.Model)
	b.Write(model)
	maxTokens := r.MaxTokens
	if maxTokens <= 0 {
		maxTokens = 1024 // the API requires one: the recorded body had none, or a wrong one
	}
	fmt.Fprintf(&b, `,"max_tokens":%d,"stream":%t`, maxTokens, r.Stream)
	section, msg, first := "", -1, true
	for _, blk := range r.Blocks {
		if blk.In != "tools" && blk.In != "system" && blk.In != "messages" {
			continue // not a section this format has
		}
		if blk.In != section {
			closeSection(&b, section, msg)
			section, msg, first = blk.In, -1, true
			b.WriteString(`,"` + blk.In + `":[`)
		}
		if section == "messages" {
			if m := msgOf(blk); m != msg {
				if msg >= 0 {
					b.WriteString(`]},`)
				}
				msg = m
				role := blk.Role
				if role != "user" && role != "assistant" && role != "system" {
					role = "user"
				}
				b.WriteString(`{"role":"` + role + `","content":[`)
			} else {
				b.WriteByte(',')
			}
			textBlock(&b, blk)
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		if section == "tools" {
			toolJSON(&b, blk)
		} else {
			textBlock(&b, blk)
		}
	}
	closeSection(&b, section, msg)
	if cc := r.Cache; cc != nil {
		b.WriteString(`,"cache_control":`)
		writeCC(&b, cc)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func msgOf(blk record.Block) int {
	if blk.Msg == nil {
		return 0
	}
	return *blk.Msg
}

func closeSection(b *bytes.Buffer, section string, msg int) {
	switch {
	case section == "":
	case section == "messages" && msg >= 0:
		b.WriteString(`]}]`)
	default:
		b.WriteByte(']')
	}
}

// writeCC writes a recorded cache_control; a type or ttl the recording
// kept as other is written as the default.
func writeCC(b *bytes.Buffer, cc *record.CacheControl) int {
	n := b.Len()
	b.WriteString(`{"type":"ephemeral"`)
	if cc.TTL != "" {
		b.WriteString(`,"ttl":"` + cc.TTL + `"`)
	}
	b.WriteByte('}')
	return b.Len() - n
}

// textBlock writes a text block whose text is the block's tokens' worth
// of text of its hash.
func textBlock(b *bytes.Buffer, blk record.Block) {
	b.WriteString(`{"type":"text","text":"`)
	n := 4 * blk.Tokens
	if blk.Type == "attribution" {
		head := "x-anthropic-billing-header: cc_version="
		b.WriteString(head)
		n -= len(head) + 1
		fillText(b, blk.Hash, max(n, 1), "0123456789abcdef")
		b.WriteByte(';')
	} else {
		fillText(b, blk.Hash, n, "abcdefghijklmnopqrstuvwxyz ")
	}
	b.WriteByte('"')
	if blk.Cache != nil {
		b.WriteString(`,"cache_control":`)
		writeCC(b, blk.Cache)
	}
	b.WriteByte('}')
}

// toolJSON writes a tool whose JSON, cache_control included, is the
// block's tokens' worth of bytes (at least what its name and schema take).
func toolJSON(b *bytes.Buffer, blk record.Block) {
	start := b.Len()
	b.WriteString(`{"name":"t_` + blk.Hash + `","input_schema":{"type":"object"},"description":"`)
	var cc bytes.Buffer
	if blk.Cache != nil {
		cc.WriteString(`,"cache_control":`)
		writeCC(&cc, blk.Cache)
	}
	used := b.Len() - start + len(`"}`) + cc.Len()
	fillText(b, blk.Hash, max(4*blk.Tokens-used, 0), "abcdefghijklmnopqrstuvwxyz ")
	b.WriteByte('"')
	b.Write(cc.Bytes())
	b.WriteByte('}')
}

// fillText writes n bytes drawn from alphabet by a stream seeded with
// hash: the same hash, the same text.
func fillText(b *bytes.Buffer, hash string, n int, alphabet string) {
	seed, _ := strconv.ParseUint(hash, 16, 64)
	var x uint64
	for i := range n {
		if i%8 == 0 {
			x = mix(seed, uint64(i/8))
		}
		b.WriteByte(alphabet[x%uint64(len(alphabet))])
		x /= uint64(len(alphabet))
	}
}

// mix is splitmix64 of two words.
func mix(a, b uint64) uint64 {
	z := a ^ (b+0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func init() { verdictKinds["replay"] = replayVerdict }

// replayVerdict, for recorded traffic replayed: what windowing would
// save on it (input cost, with the cache writes beside), what it would
// spare of the rate limits (the upstream's 429s) and what it would cost
// or gain in latency (p50 and the tail).
func replayVerdict(in *verdictInput) ScenarioVerdict {
	s, base := in.pick([]string{ModeWindowed}, []string{ModePlain})
	b := newVerdict(s, base)
	cost := func(m *ModeReport) float64 { return m.InputCostUSD }
	sc, bc := in.vals(s, cost), in.vals(base, cost)
	b.add("input_cost", "input cost", per(sc, bc, quotient), times, judge(sc, bc, 0, false))
	writes := func(m *ModeReport) float64 { return float64(m.Tokens.CacheCreation) }
	b.pair("cache_write_tokens", "cache writes (tokens)", in.vals(s, writes), in.vals(base, writes), count, -1)
	r429 := func(m *ModeReport) float64 { return float64(m.Upstream429) }
	s4, b4 := in.vals(s, r429), in.vals(base, r429)
	b.pair("upstream_429", "upstream 429s", s4, b4, count, judge(s4, b4, 0, false))
	p50 := func(m *ModeReport) float64 { return m.LatencyMS.P50 }
	sv, bv := in.vals(s, p50), in.vals(base, p50)
	b.add("p50", "p50", per(sv, bv, diff), deltaMS, judge(sv, bv, VerdictFloorMS, false))
	in.tail(b, s, base, true)
	in.failures(b, s, base, true)
	return b.done(len(in.runs))
}
