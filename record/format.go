// Package record keeps the shape of the Messages requests sluice serves
// (RECORD_FILE), so that `sluice bench --replay` can send traffic of the
// same shape through the plain and the windowed path and show what
// windowing would save on it. A recording holds no prompt text, no key and
// no body: for each request its arrival, salted hashes of its tenant and
// key, its model, stream flag and max_tokens, and its prompt as blocks in
// the API's prefix order, each with its estimated tokens, a salted hash of
// its content and its cache_control; and, from the answer, the status, the
// anthropic-ratelimit-*-limit values and the usage (docs/replay.md).
package record

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/request"
)

// Version is the format's version, in every file's header.
const Version = 1

// Header is a recording file's first line. Salt keys every hash of one
// recording, so that equal blocks within it hash equal and nothing in one
// recording can be matched with another's; it is kept so that a sluice
// restarted on the same file goes on with the same recording.
type Header struct {
	Recording int       `json:"sluice_recording"` // Version
	ID        string    `json:"id"`               // the recording's id: random, the files of one recording share it
	Part      int       `json:"part"`             // 1 for the first file, one more at each rotation
	Started   time.Time `json:"started"`
	Salt      string    `json:"salt"` // hex
}

// Request is the shape of one Messages request and of its answer: one line
// of a recording.
type Request struct {
	// T is when sluice began handling the request.
	T time.Time `json:"t"`
	// Tenant and Key are salted hashes of the request's tenant (see
	// TENANT_FROM) and of the upstream key it was sent with; "" when it had
	// none.
	Tenant string `json:"tenant,omitempty"`
	Key    string `json:"key,omitempty"`
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
	// MaxTokens is the body's max_tokens (0 when absent or not a count).
	MaxTokens int     `json:"max_tokens"`
	Blocks    []Block `json:"blocks"`
	// Cache is the body's top-level cache_control (automatic caching).
	Cache *CacheControl `json:"cache_control,omitempty"`
	// Status is what sluice answered the client (499: it left first).
	Status int     `json:"status"`
	Limits *Limits `json:"limits,omitempty"`
	Usage  *Usage  `json:"usage,omitempty"`
}

// Block is one block of a prompt.
type Block struct {
	// In is the block's section: tools, system or messages.
	In string `json:"in"`
	// Msg is a message's index in messages, Role its role (user,
	// assistant, system or other); absent for tools and system.
	Msg  *int   `json:"msg,omitempty"`
	Role string `json:"role,omitempty"`
	// Type is a content block's type when it is one the API documents
	// (text, image, tool_use, tool_result, ...; other otherwise), or
	// attribution for Claude Code's x-anthropic-billing-header line (a
	// first system text block without cache_control); absent for tools.
	Type   string        `json:"type,omitempty"`
	Tokens int           `json:"tokens"`
	Hash   string        `json:"hash"`
	Cache  *CacheControl `json:"cache_control,omitempty"`
}

// CacheControl is a breakpoint: its type (ephemeral, or other) and ttl
// (5m, 1h, or empty for the default or a value the API does not know).
type CacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// Limits are the answer's anthropic-ratelimit-*-limit values: the limits of
// the key it was sent with, per minute. Zero: not in the answer.
type Limits struct {
	Requests     int `json:"requests,omitempty"`
	InputTokens  int `json:"input_tokens,omitempty"`
	OutputTokens int `json:"output_tokens,omitempty"`
	Tokens       int `json:"tokens,omitempty"`
}

// Usage is the answer's usage, when it had one.
type Usage struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheWrite int64 `json:"cache_creation_input_tokens"`
	CacheRead  int64 `json:"cache_read_input_tokens"`
}

// limitsOf reads the anthropic-ratelimit-*-limit headers of h; nil when
// there are none.
func limitsOf(h http.Header) *Limits {
	var l Limits
	for _, f := range []struct {
		name string
		to   *int
	}{
		{"Anthropic-Ratelimit-Requests-Limit", &l.Requests},
		{"Anthropic-Ratelimit-Input-Tokens-Limit", &l.InputTokens},
		{"Anthropic-Ratelimit-Output-Tokens-Limit", &l.OutputTokens},
		{"Anthropic-Ratelimit-Tokens-Limit", &l.Tokens},
	} {
		if v := h.Get(f.name); v != "" {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				*f.to = n
			}
		}
	}
	if l == (Limits{}) {
		return nil
	}
	return &l
}

// hashLen is how many bytes of a salted hash a recording keeps: 64 bits,
// enough that two blocks of one recording never collide by chance.
const hashLen = 8

// hasher is a recording's salted hash.
type hasher struct {
	mac hash.Hash
	sum []byte
}

func newHasher(salt []byte) *hasher { return &hasher{mac: hmac.New(sha256.New, salt)} }

// of is the salted hash of a value that names someone (a tenant, a key),
// apart from any block's by its label.
func (h *hasher) of(label, v string) string {
	if v == "" {
		return ""
	}
	h.mac.Reset()
	h.mac.Write([]byte(label))
	h.mac.Write([]byte{0})
	h.mac.Write([]byte(v))
	h.sum = h.mac.Sum(h.sum[:0])
	return hex.EncodeToString(h.sum[:hashLen])
}

// Words the recording keeps as they are: anything else is "other", so that
// no text a client chose reaches the file.
var (
	roles      = set("user", "assistant", "system")
	blockTypes = set("text", "image", "document", "tool_use", "tool_result", "thinking", "redacted_thinking",
		"server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
		"search_result", "container_upload", "mcp_tool_use", "mcp_tool_result")
	ccTypes = set("ephemeral")
	ccTTLs  = set("5m", "1h")
)

func set(words ...string) map[string]bool {
	m := map[string]bool{}
	for _, w := range words {
		m[`"`+w+`"`] = true
	}
	return m
}

// word is the JSON string raw without its quotes when allowed knows it,
// else "other" (or "" when raw is nil).
func word(raw []byte, allowed map[string]bool) string {
	switch {
	case raw == nil:
		return ""
	case allowed[string(raw)]:
		return string(raw[1 : len(raw)-1])
	}
	return "other"
}

// attributionPrefix begins Claude Code's attribution line (a first system
// block whose hex part changes with the request's content) as a body
// spells it: request.AttributionPrefix in its opening quote.
const attributionPrefix = `"` + request.AttributionPrefix

// maxLineBlocks bounds the blocks of one line (some 6 MB of JSON): a
// body of millions of tiny blocks, which the upstream would refuse but
// sluice records all the same, cost gigabytes and seconds of the writer
// before its line was found too large. A request with more is dropped, as
// too large; real prompts have a few thousand.
const maxLineBlocks = 1 << 16

// shape is the recording's line for one exchange: its body walked into
// blocks, everything hashed with h; false when it has more than
// maxLineBlocks blocks.
func shape(e *Exchange, h *hasher) (Request, bool) {
	r := Request{T: e.Arrival, Tenant: h.of("tenant", e.Tenant), Key: h.of("key", e.Key), Model: e.Model, Stream: e.Stream,
		MaxTokens: e.MaxTokens, Status: e.Status, Limits: e.limits, Usage: e.Usage}
	system, over := 0, false
	auto := request.Shapes(e.Body, h.mac, func(b *request.Shape) bool {
		if len(r.Blocks) == maxLineBlocks {
			over = true
			return false
		}
		out := Block{In: b.Section.String(), Tokens: b.Tokens, Hash: hex.EncodeToString(b.Sum[:hashLen]), Cache: cacheOf(b.CacheControl)}
		switch b.Section {
		case request.SectionMessages:
			msg := b.Message
			out.Msg, out.Role = &msg, word(b.Role, roles)
			if out.Role == "" {
				out.Role = "other"
			}
			fallthrough
		case request.SectionSystem:
			out.Type = word(b.Type, blockTypes)
			if b.Type == nil && b.Text != nil {
				out.Type = "text" // a string content: one text block
			}
		}
		if b.Section == request.SectionSystem {
			if system == 0 && out.Type == "text" && out.Cache == nil && len(b.Text) >= len(attributionPrefix) &&
				string(b.Text[:len(attributionPrefix)]) == attributionPrefix {
				out.Type = "attribution"
			}
			system++
		}
		r.Blocks = append(r.Blocks, out)
		return true
	})
	r.Cache = cacheOf(auto)
	return r, !over
}

// cacheOf reads a raw cache_control object; nil for nil.
func cacheOf(raw []byte) *CacheControl {
	if raw == nil {
		return nil
	}
	var cc struct {
		Type json.RawMessage `json:"type"`
		TTL  json.RawMessage `json:"ttl"`
	}
	_ = json.Unmarshal(raw, &cc) // valid JSON: request.Shapes walked it
	out := &CacheControl{Type: word(cc.Type, ccTypes), TTL: word(cc.TTL, ccTTLs)}
	if out.TTL == "other" {
		out.TTL = ""
	}
	return out
}
