package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/request"
)

// segment is one cacheable unit of a prompt, in the API's cache order
// (tools, then system, then messages).
type segment struct {
	canon  []byte // canonical bytes, without cache_control
	tokens int
	cc     *cacheControl
	// outside: a leading attribution line, counted as input but in no
	// cached prefix (see attributionLine).
	outside bool
	// kind is the block's type ("text", "tool_use", "tool_result", …;
	// "tool" for a tool definition): a run of tool_use blocks, or of
	// tool_result blocks, is one lookback position (lookbackPositions).
	kind string
	// empty: an empty text block, which cannot carry a breakpoint.
	empty bool
}

type cacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// toolDef is a tool the model may call.
type toolDef struct {
	Name   string
	Schema json.RawMessage
}

// prompt is a parsed request prompt: its token count, its cache
// breakpoints and a hash that decides the reply.
type prompt struct {
	model       string
	segments    []segment
	tools       []toolDef
	total       int // estimated input tokens of the whole prompt
	hash        uint64
	breakpoints []breakpoint
	thinking    thinkingConfig
	// msgStart is the index of the first messages segment; thinkingKey
	// (the thinking parameter, when sent) is hashed in before it, because
	// changing thinking invalidates the cached messages but not the cached
	// tools and system prompt.
	msgStart    int
	thinkingKey []byte
	// toolResults counts the tool_result blocks of the messages: the
	// turns of a tool loop so far (Config.ToolUseMax).
	toolResults int
	// msgEnds is, for each message, the index of the segment after its
	// last: where cache diagnostics compare the history message by message.
	msgEnds []int
	// positions are the block boundaries a cache read may end at, in
	// order (computed with the breakpoints, only when there are any).
	positions []position
}

// position is a block boundary of the prompt: the prefix ending there.
type position struct {
	key    [32]byte // hash of model and canonical prefix
	tokens int      // tokens in the prefix
}

// breakpoint is a cacheable prefix ending at a cache_control marker.
type breakpoint struct {
	key    [32]byte // hash of model and canonical prefix
	tokens int      // tokens in the prefix
	ttl    string   // "5m" or "1h"
	pos    int      // its index in prompt.positions
}

// messagesRequest is the part of a Messages request the simulator reads.
// Fields it does not model (metadata, service_tier, temperature, top_k,
// top_p, and any the API adds later) are
// ignored, as the decoder ignores unknown fields: the API accepts them.
type messagesRequest struct {
	Model         string            `json:"model"`
	MaxTokens     *int              `json:"max_tokens"`
	Messages      []inMessage       `json:"messages"`
	System        json.RawMessage   `json:"system"`
	Stream        bool              `json:"stream"`
	StopSequences []string          `json:"stop_sequences"`
	Tools         []json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage   `json:"tool_choice"`
	CacheControl  *cacheControl     `json:"cache_control"`
	Thinking      json.RawMessage   `json:"thinking"`
	// Diagnostics opts in to cache diagnostics (diagnostics.go); the
	// other three are read only as parameters whose change makes the
	// diagnosis unavailable.
	Diagnostics       json.RawMessage `json:"diagnostics"`
	ContextManagement json.RawMessage `json:"context_management"`
	OutputConfig      json.RawMessage `json:"output_config"`
	OutputFormat      json.RawMessage `json:"output_format"`
}

// thinkingConfig is the request's thinking parameter.
type thinkingConfig struct {
	Type         string `json:"type"` // enabled, disabled, adaptive or between_tools
	BudgetTokens *int   `json:"budget_tokens"`
	Display      string `json:"display"` // summarized or omitted
}

// minThinkingBudget is the smallest budget_tokens the API takes.
const minThinkingBudget = 1024

// parseThinking reads and checks the thinking parameter as the API does:
// a known type, and for enabled a budget of at least 1024 tokens below
// max_tokens (when max_tokens is given). A missing thinking is disabled.
func parseThinking(raw json.RawMessage, maxTokens *int) (thinkingConfig, *apierror.Error) {
	var tc thinkingConfig
	if len(raw) == 0 || string(raw) == "null" {
		return thinkingConfig{Type: "disabled"}, nil
	}
	if err := json.Unmarshal(raw, &tc); err != nil {
		return tc, errInvalid("thinking: must be an object such as {\"type\": \"adaptive\"}")
	}
	switch tc.Type {
	case "adaptive", "disabled", "between_tools":
	case "enabled":
		if tc.BudgetTokens == nil {
			return tc, errInvalid("thinking.enabled.budget_tokens: field required")
		}
		if *tc.BudgetTokens < minThinkingBudget {
			return tc, errInvalid("thinking.enabled.budget_tokens: Input should be greater than or equal to " + strconv.Itoa(minThinkingBudget))
		}
		if maxTokens != nil && *tc.BudgetTokens >= *maxTokens {
			return tc, errInvalid("max_tokens must be greater than thinking.budget_tokens; raise max_tokens or lower the budget")
		}
	case "":
		return tc, errInvalid("thinking.type: field required")
	default:
		return tc, errInvalid("thinking.type: must be one of enabled, disabled, adaptive, between_tools")
	}
	switch tc.Display {
	case "", "summarized", "omitted":
	default:
		return tc, errInvalid("thinking.display: must be \"summarized\" or \"omitted\"")
	}
	return tc, nil
}

type inMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type toolChoice struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

const maxBreakpoints = 4

// parsePrompt turns a request into segments, tools and breakpoints. It is
// shared by messages, count_tokens and batches so they estimate alike.
func parsePrompt(req *messagesRequest) (*prompt, *apierror.Error) {
	p := &prompt{model: req.Model}
	tc, aerr := parseThinking(req.Thinking, req.MaxTokens)
	if aerr != nil {
		return nil, aerr
	}
	p.thinking = tc
	if tc.Type != "disabled" {
		p.thinkingKey, _ = json.Marshal(tc)
	}
	for i, raw := range req.Tools {
		var t struct {
			Name         string          `json:"name"`
			InputSchema  json.RawMessage `json:"input_schema"`
			CacheControl *cacheControl   `json:"cache_control"`
		}
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, errInvalid("tools." + strconv.Itoa(i) + ": must be an object: " + err.Error())
		}
		if t.Name == "" {
			return nil, errInvalid("tools." + strconv.Itoa(i) + ".name: field required")
		}
		p.tools = append(p.tools, toolDef{t.Name, t.InputSchema})
		p.add(canonical(raw, t.CacheControl), len(raw), t.CacheControl)
		p.segments[len(p.segments)-1].kind = "tool"
	}
	if len(req.System) > 0 && string(req.System) != "null" {
		if err := p.addContent("system", true, req.System); err != nil {
			return nil, errInvalid("system" + strings.TrimPrefix(err.Message, "content"))
		}
	}
	p.msgStart = len(p.segments)
	for i, m := range req.Messages {
		switch m.Role {
		case "user", "assistant", "system":
			// A system message (sent by current clients between turns) is
			// part of the messages segment list: it is counted and cached
			// in place, like any other turn.
		default:
			return nil, errInvalid("messages." + strconv.Itoa(i) + ".role: must be \"user\", \"assistant\" or \"system\"")
		}
		if len(m.Content) == 0 || string(m.Content) == "null" {
			return nil, errInvalid("messages." + strconv.Itoa(i) + ".content: field required")
		}
		// A system turn is tagged apart from the top-level system prompt,
		// so moving text between the two changes the prefix, as it would
		// change the rendered prompt.
		tag := m.Role
		if tag == "system" {
			tag = "system-turn"
		}
		if err := p.addContent(tag, m.Role == "system", m.Content); err != nil {
			return nil, errInvalid("messages." + strconv.Itoa(i) + "." + err.Message)
		}
		p.msgEnds = append(p.msgEnds, len(p.segments))
	}
	if req.CacheControl != nil {
		if aerr := p.automaticBreakpoint(req.CacheControl); aerr != nil {
			return nil, aerr
		}
	}

	fh := fnv.New64a()
	fh.Write([]byte(req.Model))
	if req.MaxTokens != nil {
		fh.Write(binary.LittleEndian.AppendUint64(nil, uint64(*req.MaxTokens)))
	}
	n := 0
	for _, s := range p.segments {
		p.total += s.tokens
		fh.Write(s.canon)
		fh.Write([]byte{0})
		if s.cc != nil {
			n++
			if s.cc.Type != "" && s.cc.Type != "ephemeral" {
				return nil, errInvalid("cache_control.type: must be \"ephemeral\"")
			}
			if s.cc.TTL != "" && s.cc.TTL != "5m" && s.cc.TTL != "1h" {
				return nil, errInvalid("cache_control.ttl: must be \"5m\" or \"1h\"")
			}
		}
	}
	if n > maxBreakpoints {
		return nil, errInvalid("A maximum of 4 blocks with cache_control may be provided. Found " + strconv.Itoa(n) + "; remove breakpoints so at most 4 remain")
	}
	for _, s := range req.StopSequences {
		fh.Write([]byte(s))
		fh.Write([]byte{1})
	}
	fh.Write(req.ToolChoice)
	fh.Write(p.thinkingKey)
	p.hash = fh.Sum64()
	if p.total < 1 {
		p.total = 1
	}
	if n > 0 {
		p.computeBreakpoints()
	}
	return p, nil
}

// automaticBreakpoint applies a top-level cache_control as the
// prompt-caching page documents automatic caching: the breakpoint goes on
// the last cacheable block (not an empty text block, not a thinking
// block), so it moves forward as the conversation grows. A block that
// already carries the same marker stays one breakpoint; one with another
// ttl is refused, as the API does. It counts toward the 4 breakpoints.
func (p *prompt) automaticBreakpoint(cc *cacheControl) *apierror.Error {
	for i := len(p.segments) - 1; i >= 0; i-- {
		s := &p.segments[i]
		if s.empty || s.outside || s.kind == "thinking" || s.kind == "redacted_thinking" {
			continue
		}
		if s.cc == nil {
			s.cc = cc
			return nil
		}
		if ttlName(s.cc.TTL) != ttlName(cc.TTL) {
			return errInvalid("cache_control: the top-level cache_control (automatic caching, ttl " + ttlName(cc.TTL) +
				") falls on the last block, which has its own cache_control with ttl " + ttlName(s.cc.TTL) + "; give both the same ttl or drop one")
		}
		return nil
	}
	return nil
}

// ttlName is a cache_control ttl as it is billed: "1h", or "5m" for the
// default.
func ttlName(ttl string) string {
	if ttl == "1h" {
		return "1h"
	}
	return "5m"
}

func (p *prompt) add(canon []byte, chars int, cc *cacheControl) {
	p.segments = append(p.segments, segment{canon: canon, tokens: request.EstimateTokens(chars), cc: cc})
}

// addContent adds a string or an array of content blocks spoken by role;
// textOnly (the system prompt and system turns) refuses other block types.
func (p *prompt) addContent(role string, textOnly bool, raw json.RawMessage) *apierror.Error {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) > 0 && trimmed[0] == '"' {
		var text string
		if err := json.Unmarshal(trimmed, &text); err != nil {
			return errInvalid("content: " + err.Error())
		}
		p.add(textCanon(role, text), len(text), nil)
		p.segments[len(p.segments)-1].kind = "text"
		p.segments[len(p.segments)-1].empty = text == ""
		return nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(trimmed, &blocks); err != nil {
		return errInvalid("content: must be a string or an array of content blocks")
	}
	for i, b := range blocks {
		var blk struct {
			Type         string        `json:"type"`
			Text         string        `json:"text"`
			CacheControl *cacheControl `json:"cache_control"`
		}
		if err := json.Unmarshal(b, &blk); err != nil {
			return errInvalid("content." + strconv.Itoa(i) + ": must be a content block object")
		}
		if blk.Type == "" {
			return errInvalid("content." + strconv.Itoa(i) + ".type: field required")
		}
		if textOnly && blk.Type != "text" {
			return errInvalid("content." + strconv.Itoa(i) + ".type: a system prompt or system message takes only text blocks")
		}
		if blk.Type == "text" {
			p.add(textCanon(role, blk.Text), len(blk.Text), blk.CacheControl)
			p.segments[len(p.segments)-1].kind = "text"
			p.segments[len(p.segments)-1].empty = blk.Text == ""
			if i == 0 && role == "system" && attributionLine(b) {
				p.segments[len(p.segments)-1].outside = true
			}
			continue
		}
		if blk.Type == "tool_result" {
			p.toolResults++
		}
		p.add(append([]byte(role+"\x00"), canonical(b, blk.CacheControl)...), len(b), blk.CacheControl)
		p.segments[len(p.segments)-1].kind = blk.Type
	}
	return nil
}

// attributionLine tells whether the first system block raw is the
// attribution line Claude Code sends there: an object whose only members
// are "type":"text" and a "text" that begins, as the body spells it, with
// request.AttributionPrefix (so no cache_control). The API reads it as
// billing metadata and caches the prompt without it; request.Parse keeps
// it out of sluice's prefix keys by the same rule (docs/sim.md, "The
// attribution line").
func attributionLine(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || len(m) != 2 {
		return false
	}
	return string(m["type"]) == `"text"` && bytes.HasPrefix(m["text"], []byte(`"`+request.AttributionPrefix))
}

func textCanon(role, text string) []byte {
	b := make([]byte, 0, len(role)+len(text)+6)
	b = append(b, role...)
	b = append(b, "\x00text\x00"...)
	return append(b, text...)
}

// canonical returns raw without its cache_control, so that moving a
// breakpoint does not change the prefix it marks.
func canonical(raw json.RawMessage, cc *cacheControl) []byte {
	if cc == nil {
		return raw
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return raw
	}
	delete(m, "cache_control")
	out, err := json.Marshal(m)
	if err != nil {
		return raw
	}
	return out
}

// computeBreakpoints hashes the prefix ending at every block boundary a
// cache read may end at (prompt.positions) and notes which of them carry
// a breakpoint. Every block's end is a position, except that a run of
// consecutive tool_use blocks, or of tool_result blocks, is one position
// (its end) unless a breakpoint sits inside it: the prompt-caching page's
// lookback counts positions so.
func (p *prompt) computeBreakpoints() {
	h := sha256.New()
	h.Write([]byte(p.model))
	h.Write([]byte{0})
	tokens := 0
	for i, s := range p.segments {
		if i == p.msgStart && p.thinkingKey != nil {
			h.Write(p.thinkingKey)
			h.Write([]byte{0})
		}
		if s.outside {
			continue
		}
		h.Write(s.canon)
		h.Write([]byte{0})
		tokens += s.tokens
		if s.cc == nil && i+1 < len(p.segments) && sameRun(s.kind, p.segments[i+1].kind) {
			continue
		}
		pos := position{tokens: tokens}
		copy(pos.key[:], h.Sum(nil))
		p.positions = append(p.positions, pos)
		if s.cc == nil {
			continue
		}
		bp := breakpoint{key: pos.key, tokens: tokens, ttl: ttlName(s.cc.TTL), pos: len(p.positions) - 1}
		p.breakpoints = append(p.breakpoints, bp)
	}
}

// sameRun tells whether blocks of kinds a and b, one after the other,
// are one lookback position: consecutive tool_use, or tool_result, blocks.
func sameRun(a, b string) bool {
	return a == b && (a == "tool_use" || a == "tool_result")
}

// mix is splitmix64 over two words: cheap, stateless, well-spread, so that
// ids, jitter and faults are reproducible from the seed.
func mix(a, b uint64) uint64 {
	z := a ^ (b+0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unit maps a hash to [0, 1).
func unit(h uint64) float64 { return float64(h>>11) / (1 << 53) }
