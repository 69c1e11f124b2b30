package request

import "hash"

// Shape is one block of a prompt as Shapes walks it: where it sits, what
// it is estimated to cost, and a hash of its content. It holds no text of
// the prompt: Role and Type are the body's spelling of the message's role
// and the block's type (JSON strings, quotes included; nil when absent),
// for the caller to map onto the few values it knows.
type Shape struct {
	Section Section
	Message int    // the message's index in messages; -1 in tools and system
	Role    []byte // the message's role as the body spells it
	Type    []byte // the block's type as the body spells it; nil for a string content
	// Tokens is the block's estimated input tokens, as Parse counts them
	// (and the simulator): a text block of system or messages its text's,
	// any other block its JSON's.
	Tokens int
	// Sum is the hash of the block's content (without its cache_control),
	// as the hash given to Shapes makes it; valid until the next block.
	Sum []byte
	// CacheControl is the block's cache_control value, raw; nil without.
	CacheControl []byte
	// Text is the start of a text block's text, raw (up to the first
	// textPeek bytes of the JSON string, opening quote included), for a
	// caller that must tell a kind of block by how it begins; nil for
	// other blocks.
	Text []byte
}

// textPeek is how much of a text block's text Shapes shows its caller.
const textPeek = 64

// Shapes walks the prompt of a Messages body in the API's prefix order
// (tools, system, messages' content blocks) and calls visit for each
// block, with its content hashed by h (reset before each block: a keyed
// hash keeps the sums apart from any other hashing of the same text). It
// returns the body's top-level cache_control (automatic caching), raw, or
// nil. A body Parse refuses yields no blocks. When visit returns false the
// walk stops there (a body may hold millions of tiny blocks: a caller that
// keeps each must be able to give up without walking the rest).
//
// It is a second walk of the body, made only by callers that need each
// block (sluice's recording of traffic shapes, off the request path);
// Parse keeps its one walk. The token estimates are the same rules as
// Parse's: a test holds the two to the same totals.
func Shapes(body []byte, h hash.Hash, visit func(b *Shape) bool) (auto []byte) {
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return nil
	}
	var tools, system, messages []byte
	end := object(body, i, 0, func(k, kEnd, v int) int {
		end := skipValue(body, v, 1)
		if end < 0 {
			return -1
		}
		switch string(body[k:kEnd]) {
		case `"tools"`:
			tools = body[v:end]
		case `"system"`:
			system = body[v:end]
		case `"messages"`:
			messages = body[v:end]
		case `"cache_control"`:
			auto = body[v:end]
		}
		return end
	})
	if end < 0 || skipSpace(body, end) != len(body) {
		return nil
	}
	w := blockWalk{h: h, visit: visit}
	w.b.Message = -1
	if len(tools) > 0 && tools[0] == '[' {
		w.b.Section = SectionTools
		array(tools, 0, 0, func(v int) int { return w.block(tools, v, false) })
	}
	if len(system) > 0 && !w.stop {
		w.b.Section = SectionSystem
		w.content(system, 0)
	}
	if len(messages) > 0 && messages[0] == '[' && !w.stop {
		w.b.Section = SectionMessages
		array(messages, 0, 0, func(v int) int {
			w.b.Message++
			if messages[v] != '{' {
				return skipValue(messages, v, 1)
			}
			var role, content []byte
			end := object(messages, v, 1, func(k, kEnd, v int) int {
				end := skipValue(messages, v, 2)
				switch string(messages[k:kEnd]) {
				case `"role"`:
					role = messages[v:end]
				case `"content"`:
					content = messages[v:end]
				}
				return end
			})
			if content != nil {
				w.b.Role = role
				w.content(content, 0)
			}
			if w.stop {
				return -1
			}
			return end
		})
	}
	if len(auto) == 0 || auto[0] != '{' {
		auto = nil
	}
	return auto
}

// blockWalk is Shapes' state: the block being filled in.
type blockWalk struct {
	h     hash.Hash
	visit func(b *Shape) bool
	b     Shape
	sum   []byte
	stop  bool // visit said no more
}

// content walks a system prompt or a message's content at b[i], a string
// or an array of blocks, as prompt.content does.
func (w *blockWalk) content(b []byte, i int) int {
	switch b[i] {
	case '"':
		end := skipString(b, i)
		w.h.Reset()
		w.h.Write(textMember)
		w.h.Write(b[i:end])
		w.emit(nil, EstimateTokens(textLen(b[i:end])), nil, b[i:min(end, i+textPeek)])
		return end
	case '[':
		return array(b, i, 0, func(v int) int { return w.block(b, v, true) })
	}
	return skipValue(b, i, 0)
}

// block hashes the tool or content block at b[i] and returns its end, as
// prompt.block does.
func (w *blockWalk) block(b []byte, i int, inContent bool) int {
	w.h.Reset()
	if b[i] != '{' {
		end := skipValue(b, i, 1)
		w.h.Write(b[i:end])
		w.emit(nil, EstimateTokens(end-i), nil, nil)
		if w.stop {
			return -1
		}
		return end
	}
	var cc, typ, text []byte
	end := object(b, i, 1, func(k, kEnd, v int) int {
		end := skipValue(b, v, 2)
		switch string(b[k:kEnd]) {
		case `"cache_control"`:
			cc = b[v:end]
			return end
		case `"type"`:
			typ = b[v:end]
		case `"text"`:
			text = b[v:end]
		}
		w.h.Write(b[k:end])
		return end
	})
	chars := end - i
	var peek []byte
	if inContent && string(typ) == `"text"` {
		chars = 0
		if len(text) > 0 && text[0] == '"' {
			chars = textLen(text)
			peek = text[:min(len(text), textPeek)]
		}
	}
	if !inContent {
		typ = nil // a tool's type names the tool's kind, not a block's
	}
	w.emit(typ, EstimateTokens(chars), cc, peek)
	if w.stop {
		return -1
	}
	return end
}

func (w *blockWalk) emit(typ []byte, tokens int, cc, text []byte) {
	w.sum = w.h.Sum(w.sum[:0])
	w.b.Type, w.b.Tokens, w.b.Sum, w.b.Text = typ, tokens, w.sum, text
	w.b.CacheControl = nil
	if len(cc) > 0 && cc[0] == '{' {
		w.b.CacheControl = cc
	}
	w.stop = !w.visit(&w.b)
}
