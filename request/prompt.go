package request

import (
	"bytes"
	"hash"
	"hash/maphash"
	"time"
)

// The prompt's prefixes: the cacheable prefixes of a Messages body, read
// in the same pass as its other members.

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
	// look is a ring of the last LookbackPositions positions (block
	// boundaries a cache read may end at), each with a snapshot of h's
	// state there, so that a breakpoint's lookback window can be keyed
	// without hashing a sum at every block; positions counts them all.
	look      [LookbackPositions]lookPos
	positions int
	// readTo is the last position in reads; lastCacheable the last
	// position ending a block automatic caching may mark, and its block.
	readTo, lastCacheable, lastCacheableBlock int
	reads                                     []Prefix
	scratch                                   hash.Hash
}

// LookbackPositions is how many block boundaries the API checks for a
// cache entry at each breakpoint, counting the breakpoint's own: "The
// lookback window is 20 blocks. The system checks at most 20 positions per
// breakpoint, counting the breakpoint itself as the first" (the
// prompt-caching page). A run of consecutive tool_use blocks is one
// position, and so is a run of tool_result blocks.
const LookbackPositions = 20

// lookPos is one position in prompt.look.
type lookPos struct {
	state  [sha256StateLen]byte
	n      int // bytes of state used
	tokens int // the prefix's tokens
	ttl    time.Duration
	run    uint8 // runToolUse or runToolResult for a block of a run
	block  int   // the block ending it, by its index in the prompt
}

// sha256StateLen is the length of a SHA-256 state as it marshals (108
// bytes in Go 1.26), with room to spare.
const sha256StateLen = 128

const (
	runNone = iota
	runToolUse
	runToolResult
)

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
		p.endBlock(EstimateTokens(textLen(b[i:end])), nil, end-i > 2, runNone)
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
		p.endBlock(EstimateTokens(end-i), nil, true, runNone)
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
	cacheable := true
	run := uint8(runNone)
	switch string(typ) {
	case `"text"`:
		if inContent {
			chars = 0
			if len(text) > 0 && text[0] == '"' {
				chars = textLen(text)
			}
		}
		cacheable = len(text) > 2 // an empty text block cannot be cached
	case `"thinking"`, `"redacted_thinking"`:
		cacheable = false
	case `"tool_use"`:
		run = runToolUse
	case `"tool_result"`:
		run = runToolResult
	}
	p.endBlock(EstimateTokens(chars), cc, cacheable, run)
	return end
}

// endBlock closes a block of the given tokens, a breakpoint when cc (its
// cache_control value) is an object. cacheable says automatic caching may
// mark it (not an empty text block, not a thinking block); run, that it is
// a tool_use or tool_result block, whose consecutive runs are one lookback
// position.
func (p *prompt) endBlock(tokens int, cc []byte, cacheable bool, run uint8) {
	p.mark(markEnd)
	p.tokens += tokens
	p.blocks++
	p.lastCC = len(cc) > 0 && cc[0] == '{'
	var ttl time.Duration
	if p.lastCC {
		ttl = p.ttlOf(cc)
	}
	p.position(ttl, run)
	if cacheable {
		p.lastCacheable, p.lastCacheableBlock = p.positions-1, p.blocks-1
	}
	if p.chained && len(p.blockList) < MaxBlocks {
		p.blockList = append(p.blockList, Block{Hash: p.chain.Sum64(), Tokens: p.tokens,
			Section: p.section, Index: p.index, Breakpoint: p.lastCC})
	}
	if p.lastCC {
		p.breakpoint(p.positions - 1)
	}
}
