package request

import (
	"encoding/binary"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The scanner below accepts exactly the JSON that encoding/json accepts
// (RFC 8259 grammar, bytes that are not UTF-8 allowed inside strings, at
// most maxDepth nested arrays and objects) and walks it without decoding:
// each function takes the index of a value's first byte and returns the
// index just past its end, or -1 when the text is not valid JSON there.

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipValue returns the end of the value at b[i], which nests depth deep.
func skipValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{':
		return object(b, i, depth, func(_, _, v int) int { return skipValue(b, v, depth+1) })
	case c == '[':
		return array(b, i, depth, func(v int) int { return skipValue(b, v, depth+1) })
	case c == 't':
		return skipWord(b, i, "true")
	case c == 'f':
		return skipWord(b, i, "false")
	case c == 'n':
		return skipWord(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return skipNumber(b, i)
	}
	return -1
}

func skipWord(b []byte, i int, w string) int {
	if len(b)-i < len(w) || string(b[i:i+len(w)]) != w {
		return -1
	}
	return i + len(w)
}

// skipString returns the end of the string at b[i], its opening quote.
func skipString(b []byte, i int) int {
	for i++; i < len(b); {
		for i+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[i:])) {
			i += 8 // most of a prompt: eight plain bytes at a time
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || hex4(b[i+2:i+6]) < 0 {
					return -1
				}
				i += 6
			default:
				return -1
			}
		case c < 0x20:
			return -1
		default:
			i++
		}
	}
	return -1
}

// Tests on eight bytes at once, in a word x (Hacker's Delight 6-1): a
// byte below n leaves its high bit in (x - ones*n) &^ x (n <= 128). A byte
// above a true one may show falsely, which a test for "any" does not mind.
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

func hasLess(x uint64, n byte) bool { return (x-ones*uint64(n))&^x&highs != 0 }

func hasByte(x uint64, c byte) bool { return hasLess(x^(ones*uint64(c)), 1) }

// special tells whether any of the eight bytes in x ends a run of plain
// string bytes: a quote, a backslash or a control character.
func special(x uint64) bool { return hasByte(x, '"') || hasByte(x, '\\') || hasLess(x, 0x20) }

// hex4 is the value of four hex digits, or -1.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

func skipNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = skipDigits(b, i)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		if j := skipDigits(b, i+1); j > i+1 {
			i = j
		} else {
			return -1
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// object walks the object at b[i], which nests depth deep (the body is 0).
// For each member, member gets the index of its key's opening quote, the
// end of the key and the index of its value, consumes the value and returns
// its end, or -1. object returns the end of the object, or -1.
func object(b []byte, i, depth int, member func(k, kEnd, v int) int) int {
	i, done := open(b, i, depth, '}')
	for !done {
		if b[i] != '"' {
			return -1
		}
		kEnd := skipString(b, i)
		if kEnd < 0 {
			return -1
		}
		j := skipSpace(b, kEnd)
		if j >= len(b) || b[j] != ':' {
			return -1
		}
		i, done = next(b, member(i, kEnd, skipSpace(b, j+1)), '}')
	}
	return i
}

// array walks the array at b[i] as object walks an object: elem consumes
// each element, starting at b[v], and returns its end, or -1.
func array(b []byte, i, depth int, elem func(v int) int) int {
	i, done := open(b, i, depth, ']')
	for !done {
		i, done = next(b, elem(i), ']')
	}
	return i
}

// open enters the array or object at b[i], closed by end: it returns the
// index of its first item, or, done, the end of an empty one (or -1).
func open(b []byte, i, depth int, end byte) (int, bool) {
	if depth >= maxDepth {
		return -1, true
	}
	i = skipSpace(b, i+1)
	switch {
	case i >= len(b):
		return -1, true
	case b[i] == end:
		return i + 1, true
	}
	return i, false
}

// next reads what follows an item of an array or object that ends at
// b[i] (-1: the item was not valid): a comma, then it returns the index of
// the next item; or the closing end, then, done, the container's end (or
// -1).
func next(b []byte, i int, end byte) (int, bool) {
	if i < 0 {
		return -1, true
	}
	i = skipSpace(b, i)
	switch {
	case i >= len(b):
		return -1, true
	case b[i] == end:
		return i + 1, true
	case b[i] == ',':
		if i = skipSpace(b, i+1); i < len(b) {
			return i, false
		}
	}
	return -1, true
}

// textLen is the length in bytes of the valid JSON string s (quotes
// included) once decoded as encoding/json decodes it: escapes resolved,
// each byte that is not UTF-8 replaced by U+FFFD.
func textLen(s []byte) int {
	s = s[1 : len(s)-1]
	n := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			// Eight bytes of ASCII without a backslash decode as
			// themselves.
			if x := binary.LittleEndian.Uint64(s[i:]); x&highs == 0 && !hasByte(x, '\\') {
				n += 8
				i += 8
				continue
			}
		}
		c := s[i]
		switch {
		case c == '\\' && s[i+1] == 'u':
			var r rune
			r, i = escapedRune(s, i)
			n += utf8.RuneLen(r)
		case c == '\\':
			n++
			i += 2
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				n += 3
			} else {
				n += size
			}
			i += size
		}
	}
	return n
}

// escapedRune decodes the \u escape at s[i], and the one after it when the
// two are a surrogate pair, as encoding/json does: it returns the rune
// (U+FFFD for a lone surrogate) and the index past the escapes.
func escapedRune(s []byte, i int) (rune, int) {
	r := hex4(s[i+2:])
	i += 6
	if !utf16.IsSurrogate(r) {
		return r, i
	}
	if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
		if d := utf16.DecodeRune(r, hex4(s[i+2:])); d != unicode.ReplacementChar {
			return d, i + 6
		}
	}
	return unicode.ReplacementChar, i
}
