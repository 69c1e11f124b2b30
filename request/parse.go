package request

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"hash/maphash"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// The bodies Parse refuses; everything else about a body is the
// upstream's to judge.
var (
	ErrEmpty       = errors.New("the body is empty")
	ErrNotObject   = errors.New("the body is not a JSON object")
	ErrInvalidJSON = errors.New("the body is not valid JSON")
)

// MaxPrefixes is how many breakpoints the API allows in one request, and
// how many Parse keeps: the first ones in prefix order. A request with more
// is the upstream's to refuse.
const MaxPrefixes = 4

// maxModel bounds the model name kept, so that a hostile body cannot put
// a long string in the log.
const maxModel = 128

// MaxUserID bounds the metadata.user_id kept (the API's own limit is 256
// characters): it may name a tenant, in logs and metrics.
const MaxUserID = 256

// Parse reads the descriptor of a Messages request from its body and
// headers. It refuses a body that is empty, not a JSON object, not valid
// JSON (as encoding/json judges it) or ambiguous in its names; a field of the wrong type is
// ignored, since the API, not sluice, decides what is valid. It decodes
// nothing but the model: one pass validates the body and finds its parts,
// and one walk of tools, system and messages, in the API's prefix order,
// hashes the prompt and estimates its tokens. Besides the descriptor it
// allocates only the hash's state (and, for a model with escapes, its
// decoding), whatever the body's size.
//
// A member's name is read decoded, as the API reads it; Parse refuses
// (with a *NameError) a body in which a member it reads appears twice, or
// is named as one it reads but for case, so that it reads what any
// decoder the upstream might use reads (see names.go).
func Parse(body []byte, h http.Header) (Descriptor, error) {
	d, _, err := parseBody(body, h, false)
	return d, err
}

// ParseBlocks is Parse that also gives the prompt's blocks in prefix
// order (see Block), at most MaxBlocks of them: what explaining a cache
// write needs. It costs a second, fast hash of the same bytes and the
// slice; Parse alone pays neither.
func ParseBlocks(body []byte, h http.Header) (Descriptor, []Block, error) {
	return parseBody(body, h, true)
}

func parseBody(body []byte, h http.Header, blocks bool) (Descriptor, []Block, error) {
	cred := Tenant(h)
	d := Descriptor{Tenant: cred, Key: cred, Patience: Patience(h)}
	i := skipSpace(body, 0)
	if i == len(body) {
		return d, nil, ErrEmpty
	}
	if body[i] != '{' {
		return d, nil, ErrNotObject
	}
	var model, tools, system, messages, auto, metadata []byte
	var seen uint16
	var nameErr error
	end := object(body, i, 0, func(k, kEnd, v int) int {
		end := skipValue(body, v, 1)
		if end < 0 {
			return -1
		}
		f, err := topFields.check(body[k:kEnd], &seen)
		if err != nil && nameErr == nil {
			nameErr = err // refused once the body is known to be JSON
		}
		val := body[v:end]
		switch f {
		case fModel:
			model, d.Model = val, modelOf(val)
		case fStream:
			d.Stream = string(val) == "true"
		case fMaxTokens:
			d.Cost.MaxTokens = countOf(val)
		case fTools:
			tools = val
		case fSystem:
			system = val
		case fMessages:
			messages = val
		case fCacheControl:
			auto = val
		case fMetadata:
			metadata = val
		}
		return end
	})
	refused := Descriptor{Tenant: d.Tenant, Key: d.Key, Patience: d.Patience}
	if end < 0 || skipSpace(body, end) != len(body) {
		return refused, nil, ErrInvalidJSON
	}
	if nameErr != nil {
		return refused, nil, nameErr
	}
	// Different models never share a prefix: the key starts with the
	// model as the body spells it.
	p := prompt{h: sha256.New()}
	if blocks {
		p.chained = true
		p.chain.SetSeed(blockSeed)
		p.blockList = make([]Block, 0, 32) // a coding agent's tools, system and first turns
	}
	p.write(model)
	p.mark(markEnd)
	p.tools(tools)
	p.system(system)
	p.messages(messages)
	p.automatic(auto)
	var err error
	if d.UserID, err = userIDOf(metadata); err != nil {
		return refused, nil, err
	}
	if p.err != nil {
		return refused, nil, p.err
	}
	d.Prefixes = p.prefixes
	d.Cost.InputTokens = max(p.tokens, 1)
	return d, p.blockList, nil
}

// modelOf decodes the JSON string val, cut to maxModel bytes; "" when val
// is not a string.
func modelOf(val []byte) string { return stringOf(val, maxModel) }

// stringOf decodes the JSON string val, cut to n bytes; "" when val is
// not a string.
func stringOf(val []byte, n int) string {
	if val[0] != '"' {
		return ""
	}
	var s string
	if raw := val[1 : len(val)-1]; utf8.Valid(raw) && !containsByte(raw, '\\') {
		k := min(len(raw), n)
		for k < len(raw) && k > 0 && !utf8.RuneStart(raw[k]) {
			k-- // on a character boundary
		}
		s = string(raw[:k])
	} else {
		_ = json.Unmarshal(val, &s) // valid JSON string: cannot fail
	}
	return Cut(s, n)
}

// Cut is s cut to at most n bytes on a character boundary: a valid UTF-8
// s stays valid (a metric's label value must be).
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// userIDOf is the user_id string of the metadata object val, cut to
// MaxUserID bytes; "" when there is none. val is valid JSON, or nil.
func userIDOf(val []byte) (string, error) {
	if len(val) == 0 || val[0] != '{' {
		return "", nil
	}
	var id string
	var seen uint16
	var nameErr error
	object(val, 0, 1, func(k, kEnd, v int) int {
		f, err := metadataFields.check(val[k:kEnd], &seen)
		if err != nil {
			nameErr = err
			return -1
		}
		end := skipValue(val, v, 2)
		if f == 0 {
			id = stringOf(val[v:end], MaxUserID)
		}
		return end
	})
	return id, nameErr
}

func containsByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// maxCount caps a count read from a body: no model takes more, and sums
// of counts (a request's cost) must not overflow.
const maxCount = 1 << 31

// countOf is the JSON number val as a non-negative int, as encoding/json
// would decode it into an int, at most maxCount; 0 when it is not one.
func countOf(val []byte) int {
	n, err := strconv.Atoi(string(val))
	if err != nil || n < 0 {
		return 0
	}
	return min(n, maxCount)
}

// Tenant is a short hash of the credential h carries in x-api-key or as
// an Authorization bearer token (the first 8 bytes of its SHA-256, in
// hex), so that the same key names the same tenant whichever header the
// SDK sends it in; "" when h carries neither.
func Tenant(h http.Header) string {
	cred := h.Get("X-Api-Key")
	if cred == "" {
		auth := h.Get("Authorization")
		if len(auth) > len("Bearer ") && strings.EqualFold(auth[:len("Bearer ")], "Bearer ") {
			cred = strings.TrimSpace(auth[len("Bearer "):])
		}
	}
	if cred == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(cred))
	return hex.EncodeToString(sum[:8])
}

// Patience is how long the client waits, from the official SDKs'
// x-stainless-timeout header in whole seconds; 0 when it is absent, 0 or
// not a positive whole number of seconds that a Duration can hold.
func Patience(h http.Header) time.Duration {
	v := h.Get("X-Stainless-Timeout")
	if v == "" {
		return 0 // most requests: no ParseInt, whose error allocates
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/int64(time.Second) {
		return 0
	}
	return time.Duration(n) * time.Second
}

// prompt walks a body's prompt in the API's prefix order (tools, system,
// messages), feeding a canonical form of it to one hash and taking a key
// at each breakpoint. The canonical form of a block is its members but
// cache_control, each as the body spells it (key, colon, value), followed
// by a 0 byte, so that a block hashes alike with a marker or without; a
// string content hashes as the one text block it stands for. Each section
// and each message's role is announced by a byte that cannot occur in
// JSON text.
type prompt struct {
	h        hash.Hash
	tokens   int      // estimated tokens so far
	prefixes []Prefix // at most MaxPrefixes
	blocks   int      // blocks hashed so far
	lastCC   bool     // the last block hashed is a breakpoint
	// outside is the tokens counted in tokens but in no prefix: an
	// attribution line's.
	outside int
	// role is the role of the message being walked, until it is
	// written before the message's first block.
	role []byte
	err  error // a *NameError met in the walk, which then stops
	// chain, when blocks are asked for, hashes what h does, and blockList
	// takes its sum at each block's end; section and index are where the
	// block being walked sits.
	chained   bool
	chain     maphash.Hash
	blockList []Block
	section   Section
	index     int
}

// check is fs.check, keeping a refusal in p.err.
func (p *prompt) check(fs *fields, key []byte, seen *uint16) int {
	f, err := fs.check(key, seen)
	if err != nil {
		if p.err == nil {
			p.err = err
		}
		return -2
	}
	return f
}

// write feeds b to the prefix hash, and to the block chain if kept.
func (p *prompt) write(b []byte) {
	p.h.Write(b)
	if p.chained {
		p.chain.Write(b)
	}
}

// Section and role markers: bytes no JSON text contains.
const (
	markTools    = 1
	markSystem   = 2
	markMessages = 3
	markRole     = 4
	markEnd      = 0
)

// textMember is how a text block's members begin, as the SDKs write them.
var textMember = []byte(`"type":"text""text":`)

var marks = [...]byte{markEnd, markTools, markSystem, markMessages, markRole}

func (p *prompt) mark(m byte) { p.write(marks[m : m+1]) }

func (p *prompt) tools(val []byte) {
	p.mark(markTools)
	p.section, p.index = SectionTools, 0
	if len(val) > 0 && val[0] == '[' {
		array(val, 0, 0, func(v int) int { end := p.block(val, v, false); p.index++; return end })
	}
}

func (p *prompt) system(val []byte) {
	p.mark(markSystem)
	p.section, p.index = SectionSystem, 0
	if len(val) == 0 || val[0] != '[' {
		if len(val) > 0 {
			p.content(val, 0)
		}
		return
	}
	first := true
	array(val, 0, 0, func(v int) int {
		if first {
			first = false
			if end, tokens := attributionLine(val, v); end > 0 {
				// Counted as input, kept out of every key and prefix.
				p.tokens += tokens
				p.outside += tokens
				p.blocks++
				p.lastCC = false
				// A place in the block list all the same (its hash the
				// chain's so far: nothing of it is hashed), so that
				// later system blocks keep their indexes.
				if p.chained && len(p.blockList) < MaxBlocks {
					p.blockList = append(p.blockList, Block{Hash: p.chain.Sum64(), Tokens: p.tokens, Section: SectionSystem, Index: p.index})
				}
				p.index++
				return end
			}
		}
		end := p.block(val, v, true)
		p.index++
		return end
	})
}

// AttributionPrefix begins the text of the attribution line Claude Code
// puts first in system, `x-anthropic-billing-header: cc_version=...;
// cc_entrypoint=...; cch=...;`. Its hex parts are computed from the
// request's own content, so they differ between agents and between turns;
// the first-party API reads the line as billing metadata, not as prompt
// text, and caches the prompt without it (docs/sim.md, "The attribution
// line", gives the sources).
const AttributionPrefix = "x-anthropic-billing-header:"

// attributionLine tells whether the system block at b[i] is an attribution
// line, and if so returns its end and its text's estimated tokens; else
// (0, 0). It is one when the block is an object whose only members are
// "type":"text" and a "text" string that begins, as the body spells it,
// with AttributionPrefix: no cache_control, nothing else. A block that is
// not one is given up at its first member that differs, so the big first
// system block of other clients costs a few bytes' look.
func attributionLine(b []byte, i int) (int, int) {
	if b[i] != '{' {
		return 0, 0
	}
	var typ, text bool
	tokens := 0
	end := object(b, i, 1, func(k, kEnd, v int) int {
		switch string(b[k:kEnd]) {
		case `"type"`:
			if typ || !bytes.HasPrefix(b[v:], []byte(`"text"`)) {
				return -1
			}
			typ = true
			return v + len(`"text"`)
		case `"text"`:
			if text || !bytes.HasPrefix(b[v:], []byte(`"`+AttributionPrefix)) {
				return -1
			}
			text = true
			end := skipString(b, v)
			tokens = EstimateTokens(textLen(b[v:end]))
			return end
		}
		return -1
	})
	if end < 0 || !typ || !text {
		return 0, 0
	}
	return end, tokens
}

func (p *prompt) messages(val []byte) {
	p.mark(markMessages)
	p.section, p.index = SectionMessages, -1
	if len(val) == 0 || val[0] != '[' {
		return
	}
	array(val, 0, 0, func(v int) int {
		p.index++ // a message's blocks all sit at its index
		if val[v] != '{' {
			return skipValue(val, v, 1)
		}
		// The role is part of the prefix before the content, and may
		// follow it in the body (the Go SDK writes it so): then the
		// content is walked once the role is known.
		var role, content []byte
		var seen uint16
		end := object(val, v, 1, func(k, kEnd, v int) int {
			switch p.check(messageFields, val[k:kEnd], &seen) {
			case -2:
				return -1
			case fRole:
				end := skipValue(val, v, 2)
				role = val[v:end]
				return end
			case fContent:
				if role != nil {
					p.role = role
					return p.content(val, v)
				}
				end := skipValue(val, v, 2)
				content = val[v:end]
				return end
			}
			return skipValue(val, v, 2)
		})
		if content != nil {
			p.role = role
			if role == nil {
				p.role = []byte{}
			}
			p.content(content, 0)
		}
		p.role = nil // a message without blocks adds nothing
		if p.err != nil {
			return -1
		}
		return end
	})
}

// content walks the system prompt or a message's content at b[i] (a string
// or an array of blocks) and returns its end.
func (p *prompt) content(b []byte, i int) int {
	switch b[i] {
	case '"':
		end := skipString(b, i)
		p.begin()
		p.write(textMember)
		p.write(b[i:end])
		p.end(EstimateTokens(textLen(b[i:end])), nil)
		return end
	case '[':
		return array(b, i, 0, func(v int) int {
			end := p.block(b, v, true)
			if p.section == SectionSystem {
				p.index++
			}
			return end
		})
	}
	return skipValue(b, i, 0)
}

// begin starts a block: a message's role first, if this is its first.
func (p *prompt) begin() {
	if p.role != nil {
		p.mark(markRole)
		p.write(p.role)
		p.role = nil
	}
}

// block hashes the tool or content block at b[i] and returns its end
// (inContent: a content block, where a text block counts the tokens of its
// text, as the simulator does).
func (p *prompt) block(b []byte, i int, inContent bool) int {
	p.begin()
	if b[i] != '{' {
		end := skipValue(b, i, 1)
		p.write(b[i:end])
		p.end(EstimateTokens(end-i), nil)
		return end
	}
	var cc, typ, text []byte
	var seen uint16
	end := object(b, i, 1, func(k, kEnd, v int) int {
		end := skipValue(b, v, 2)
		switch p.check(blockFields, b[k:kEnd], &seen) {
		case -2:
			return -1
		case fBlockCacheControl:
			cc = b[v:end]
			return end
		case fType:
			typ = b[v:end]
		case fText:
			text = b[v:end]
		}
		p.write(b[k:end])
		return end
	})
	if end < 0 {
		return -1 // p.err
	}
	chars := end - i
	if inContent && string(typ) == `"text"` {
		chars = 0
		if len(text) > 0 && text[0] == '"' {
			chars = textLen(text)
		}
	}
	p.end(EstimateTokens(chars), cc)
	return end
}

// end closes a block of the given tokens, a breakpoint when cc (its
// cache_control value) is an object.
func (p *prompt) end(tokens int, cc []byte) {
	p.mark(markEnd)
	p.tokens += tokens
	p.blocks++
	p.lastCC = len(cc) > 0 && cc[0] == '{'
	if p.lastCC {
		p.breakpoint(cc)
	}
	if p.chained && len(p.blockList) < MaxBlocks {
		p.blockList = append(p.blockList, Block{Hash: p.chain.Sum64(), Tokens: p.tokens,
			Section: p.section, Index: p.index, Breakpoint: p.lastCC})
	}
}

// automatic applies a top-level cache_control: a breakpoint on the last
// block, unless that block has its own.
func (p *prompt) automatic(cc []byte) {
	if len(cc) > 0 && cc[0] == '{' && p.blocks > 0 && !p.lastCC {
		p.breakpoint(cc)
		if n := len(p.blockList); n > 0 && n == p.blocks {
			p.blockList[n-1].Breakpoint = true
		}
	}
}

func (p *prompt) breakpoint(cc []byte) {
	if len(p.prefixes) == MaxPrefixes {
		return
	}
	if p.prefixes == nil {
		p.prefixes = make([]Prefix, 0, MaxPrefixes)
	}
	var sum [sha256.Size]byte
	p.prefixes = append(p.prefixes, Prefix{
		Key:    binary.BigEndian.Uint64(p.h.Sum(sum[:0])),
		Tokens: p.tokens - p.outside,
		TTL:    p.ttlOf(cc),
	})
}

// ttlOf is the lifetime a cache_control object asks for: an hour for
// "ttl":"1h", else the default five minutes.
func (p *prompt) ttlOf(cc []byte) time.Duration {
	ttl := 5 * time.Minute
	var seen uint16
	object(cc, 0, 0, func(k, kEnd, v int) int {
		f := p.check(cacheFields, cc[k:kEnd], &seen)
		if f == -2 {
			return -1
		}
		end := skipValue(cc, v, 1)
		if f == 0 && string(cc[v:end]) == `"1h"` {
			ttl = time.Hour
		}
		return end
	})
	return ttl
}
