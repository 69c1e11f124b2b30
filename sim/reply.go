package sim

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/request"
)

// reply is what the simulated model says, decided before any of it is sent.
type reply struct {
	blocks       []replyBlock
	stopReason   string
	stopSequence *string
	outputTokens int
}

// replyBlock is a thinking or text block (tokens) or a tool_use block
// (input JSON).
type replyBlock struct {
	kind      string   // "thinking", "text" or "tool_use"
	tokens    []string // text pieces, one per output token
	id        string
	name      string
	input     json.RawMessage
	cost      int    // output tokens of this block
	signature string // thinking only
	omitted   bool   // thinking with display "omitted": billed, not shown
}

var vocabulary = strings.Fields(`the a of to and in is it that for on with as was
be by this are or from at an which have not they but one all were can there
been has more if will would each about how up out them then she many some so
these make like into time has look two write go see number no way could people
my than first water been call who oil its now find long down day did get come
made may part model token stream cache window gate wave latency reply request
simulated answer question prompt signal system value result`)

// generate decides the reply for a request: its length from the request hash
// (or pinned by wantTokens > 0), tool use when tools and tool_choice ask for
// it, and truncation at maxTokens.
func (s *Server) generate(req *messagesRequest, p *prompt, wantTokens int) reply {
	h := mix(uint64(s.cfg.Seed), p.hash)
	rng := rand.New(rand.NewPCG(h, 0x5ee0))
	maxTokens := 1
	if req.MaxTokens != nil && *req.MaxTokens > 0 {
		maxTokens = *req.MaxTokens
	}
	think, ok := s.thinkFirst(p.thinking, h, rng)
	if !ok {
		return s.answer(req, p, wantTokens, h, rng, maxTokens)
	}
	if think.cost >= maxTokens {
		// max_tokens runs out while thinking: the reply is the cut thought.
		think.tokens, think.cost = think.tokens[:maxTokens], maxTokens
		think.signature = signatureOf(h, think.tokens)
		return reply{blocks: []replyBlock{think}, stopReason: "max_tokens", outputTokens: maxTokens}
	}
	r := s.answer(req, p, wantTokens, h, rng, maxTokens-think.cost)
	r.blocks = append([]replyBlock{think}, r.blocks...)
	r.outputTokens += think.cost
	return r
}

// thinkFirst decides whether the reply opens with a thinking block:
// always with thinking enabled (at most budget_tokens long), on about half
// the requests with adaptive thinking (the model decides), never when
// disabled or between_tools (which turns off up-front thinking). Its
// length is drawn like a reply's, from the request hash.
func (s *Server) thinkFirst(tc thinkingConfig, h uint64, rng *rand.Rand) (replyBlock, bool) {
	switch tc.Type {
	case "enabled":
	case "adaptive":
		if (h>>48)&1 != 0 {
			return replyBlock{}, false
		}
	default:
		return replyBlock{}, false
	}
	n := s.cfg.OutputTokensMin + int(mix(h, 0x7417)%uint64(s.cfg.OutputTokensMax-s.cfg.OutputTokensMin+1))
	if tc.BudgetTokens != nil {
		n = min(n, *tc.BudgetTokens)
	}
	b := textBlock(rng, n)
	b.kind = "thinking"
	b.omitted = tc.Display == "omitted"
	b.signature = signatureOf(h, b.tokens)
	return b, true
}

// signatureOf makes the opaque signature of a thinking block: base64, as
// the API's, and the same for the same thought.
func signatureOf(h uint64, tokens []string) string {
	sum := sha256.New()
	sum.Write(binary.LittleEndian.AppendUint64(nil, h))
	for _, t := range tokens {
		sum.Write([]byte(t))
	}
	return base64.StdEncoding.EncodeToString(sum.Sum(nil))
}

// answer decides the text and tool part of a reply within maxTokens.
func (s *Server) answer(req *messagesRequest, p *prompt, wantTokens int, h uint64, rng *rand.Rand, maxTokens int) reply {
	n := wantTokens
	if n <= 0 {
		n = s.cfg.OutputTokensMin + int(h%uint64(s.cfg.OutputTokensMax-s.cfg.OutputTokensMin+1))
	}

	var choice toolChoice
	if len(req.ToolChoice) > 0 {
		_ = json.Unmarshal(req.ToolChoice, &choice) // validated earlier
	}
	var tool *toolDef
	preamble := 0
	if len(p.tools) > 0 {
		switch choice.Type {
		case "any":
			tool = &p.tools[int(h>>20)%len(p.tools)]
		case "tool":
			for i := range p.tools {
				if p.tools[i].Name == choice.Name {
					tool = &p.tools[i]
				}
			}
		case "", "auto":
			// Sometimes, deterministically: ToolUseShare of auto requests
			// (half by default) call a tool, until ToolUseMax results.
			if s.callsTool(p, h) {
				tool = &p.tools[int(h>>20)%len(p.tools)]
				if name := s.toolUseName(p.toolResults); name != "" {
					for i := range p.tools {
						if p.tools[i].Name == name {
							tool = &p.tools[i]
						}
					}
				}
				preamble = min(n, 12)
			}
		}
	}

	if tool != nil {
		input, _ := json.Marshal(valueFor(tool.Schema, rng))
		if ins := s.cfg.ToolUseInput[tool.Name]; len(ins) > 0 {
			input = ins[p.toolResults%len(ins)]
		}
		tb := replyBlock{kind: "tool_use", id: "toolu_" + idString(h), name: tool.Name, input: input, cost: request.EstimateTokens(len(input))}
		if preamble+tb.cost <= maxTokens {
			var r reply
			if preamble > 0 {
				r.blocks = append(r.blocks, textBlock(rng, preamble))
			}
			r.blocks = append(r.blocks, tb)
			r.stopReason = "tool_use"
			r.outputTokens = preamble + tb.cost
			return r
		}
		// The call does not fit in max_tokens: the text is cut off instead.
	}

	r := reply{stopReason: "end_turn"}
	if n > maxTokens {
		n = maxTokens
		r.stopReason = "max_tokens"
	} else if len(req.StopSequences) > 0 && (h>>32)&1 == 0 {
		// Half the requests with stop sequences "hit" one halfway through.
		n = max(1, n/2)
		seq := req.StopSequences[int(h>>8)%len(req.StopSequences)]
		r.stopReason = "stop_sequence"
		r.stopSequence = &seq
	}
	r.blocks = []replyBlock{textBlock(rng, n)}
	r.outputTokens = n
	return r
}

// callsTool decides whether a reply to a tool_choice auto request calls a
// tool: ToolUseShare of them by the request hash, none once the
// conversation holds ToolUseMax tool results.
func (s *Server) callsTool(p *prompt, h uint64) bool {
	share := s.cfg.ToolUseShare
	if share == 0 {
		// The default keeps the test of one hash bit it always had, so that
		// replies are the same as before the setting existed.
		return (h>>40)&1 == 0 && (s.cfg.ToolUseMax <= 0 || p.toolResults < s.cfg.ToolUseMax)
	}
	if share < 0 || (s.cfg.ToolUseMax > 0 && p.toolResults >= s.cfg.ToolUseMax) {
		return false
	}
	return unit(mix(h, 0x7001)) < share
}

// toolUseName is the tool ToolUseName names for the call made when the
// conversation holds results tool results: one of its comma-separated
// names in turn; "" when it names none.
func (s *Server) toolUseName(results int) string {
	if s.cfg.ToolUseName == "" {
		return ""
	}
	names := strings.Split(s.cfg.ToolUseName, ",")
	return strings.TrimSpace(names[results%len(names)])
}

func textBlock(rng *rand.Rand, n int) replyBlock {
	pieces := make([]string, n)
	for i := range pieces {
		w := vocabulary[rng.IntN(len(vocabulary))]
		if i == 0 || i%12 == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		if i > 0 {
			w = " " + w
		}
		if i%12 == 11 || i == n-1 {
			w += "."
		}
		pieces[i] = w
	}
	return replyBlock{kind: "text", tokens: pieces, cost: n}
}

// outContent is a content block as the API sends it.
type outContent struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

func (b replyBlock) content() outContent {
	switch b.kind {
	case "text":
		t := strings.Join(b.tokens, "")
		return outContent{Type: "text", Text: &t}
	case "thinking":
		t := ""
		if !b.omitted {
			t = strings.Join(b.tokens, "")
		}
		sig := b.signature
		return outContent{Type: "thinking", Thinking: &t, Signature: &sig}
	}
	return outContent{Type: "tool_use", ID: b.id, Name: b.name, Input: b.input}
}

type usage struct {
	InputTokens              int           `json:"input_tokens"`
	CacheCreationInputTokens int           `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int           `json:"cache_read_input_tokens"`
	CacheCreation            cacheCreation `json:"cache_creation"`
	OutputTokens             int           `json:"output_tokens"`
	ServiceTier              string        `json:"service_tier"`
}

type cacheCreation struct {
	Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
}

type outMessage struct {
	ID           string       `json:"id"`
	Type         string       `json:"type"`
	Role         string       `json:"role"`
	Model        string       `json:"model"`
	Content      []outContent `json:"content"`
	StopReason   *string      `json:"stop_reason"`
	StopSequence *string      `json:"stop_sequence"`
	Usage        usage        `json:"usage"`
	// Diagnostics is the cache diagnostics member, present (null or an
	// object) only when the request sent a diagnostics object.
	Diagnostics json.RawMessage `json:"diagnostics,omitempty"`
}

func (r reply) message(id, model string, u usage) outMessage {
	m := outMessage{ID: id, Type: "message", Role: "assistant", Model: model,
		Content: make([]outContent, len(r.blocks)), StopReason: &r.stopReason, StopSequence: r.stopSequence, Usage: u}
	for i, b := range r.blocks {
		m.Content[i] = b.content()
	}
	return m
}

// valueFor makes a value that satisfies a JSON schema well enough for a
// client to decode it: by type, enum, const, required properties, bounds.
func valueFor(schema json.RawMessage, rng *rand.Rand) any {
	var m map[string]any
	if json.Unmarshal(schema, &m) != nil {
		return map[string]any{}
	}
	v := valueForSchema(m, rng, 0)
	if _, ok := v.(map[string]any); !ok {
		// A tool's input is always an object.
		return map[string]any{}
	}
	return v
}

func valueForSchema(s map[string]any, rng *rand.Rand, depth int) any {
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[rng.IntN(len(e))]
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			if sub, ok := alts[0].(map[string]any); ok {
				return valueForSchema(sub, rng, depth+1)
			}
		}
	}
	typ := ""
	switch t := s["type"].(type) {
	case string:
		typ = t
	case []any:
		for _, x := range t {
			if str, ok := x.(string); ok && str != "null" {
				typ = str
				break
			}
		}
	}
	if typ == "" {
		if _, ok := s["properties"]; ok {
			typ = "object"
		}
	}
	num := func(key string, def float64) float64 {
		if f, ok := s[key].(float64); ok {
			return f
		}
		return def
	}
	switch typ {
	case "object":
		out := map[string]any{}
		if depth > 6 {
			return out
		}
		props, _ := s["properties"].(map[string]any)
		required := map[string]bool{}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if name, ok := r.(string); ok {
					required[name] = true
				}
			}
		}
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		slices.Sort(names) // map order is random; the reply must not be
		for _, k := range names {
			sub, _ := props[k].(map[string]any)
			if required[k] || rng.IntN(2) == 0 {
				out[k] = valueForSchema(sub, rng, depth+1)
			}
		}
		return out
	case "array":
		items, _ := s["items"].(map[string]any)
		lo := int(num("minItems", 1))
		hi := int(num("maxItems", float64(lo+2)))
		n := lo
		if hi > lo {
			n += rng.IntN(hi - lo + 1)
		}
		out := make([]any, n)
		for i := range out {
			out[i] = valueForSchema(items, rng, depth+1)
		}
		return out
	case "integer":
		lo, hi := int64(num("minimum", 0)), int64(num("maximum", 100))
		if hi < lo {
			hi = lo
		}
		return lo + rng.Int64N(hi-lo+1)
	case "number":
		lo, hi := num("minimum", 0), num("maximum", 100)
		if hi < lo {
			hi = lo
		}
		return float64(int64((lo+rng.Float64()*(hi-lo))*100)) / 100
	case "boolean":
		return rng.IntN(2) == 0
	case "null":
		return nil
	case "string":
		w := vocabulary[rng.IntN(len(vocabulary))]
		if minLen := int(num("minLength", 0)); len(w) < minLen {
			w += strings.Repeat("x", minLen-len(w))
		}
		return w
	}
	return "sim-" + strconv.Itoa(rng.IntN(1000))
}
