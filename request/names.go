package request

import (
	"bytes"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Member names. sluice checks a body (the model an inbound key may call,
// whether it streams, its max_tokens) and forwards it as it came, so it
// must read each member the upstream will read. Decoders differ: all
// resolve escapes in names ("mode\u006c" is model); encoding/json matches
// a name to a field without regard to case (Unicode simple folding:
// "Model", "ſtream") and, like Python's json, takes the last of two
// members of one name; others take the first, or refuse. So Parse reads
// names decoded, and refuses a body in which a member it reads appears
// twice, or is spelled so that it matches only without regard to case:
// then every decoder that accepts the body reads the member sluice read.
// Some decoders also read a name only up to a NUL (C strings: "model\u0000"
// is model) or trim its spaces ("model "); Parse refuses a name that is one
// it reads but for such padding, which other decoders take as another
// member.

// fields is the names Parse reads in one kind of object: at most 16.
type fields struct {
	where string // the object, as a NameError names it
	names []string
}

// The objects Parse reads members of, and its index of each member.
var (
	topFields = &fields{"the body", []string{"model", "stream", "max_tokens", "tools", "system", "messages", "cache_control", "metadata"}}
	// metadataFields: the metadata object.
	metadataFields = &fields{"metadata", []string{"user_id"}}
	// messageFields: a message of messages.
	messageFields = &fields{"a message", []string{"role", "content"}}
	// blockFields: a block of tools, system or a message's content.
	blockFields = &fields{"a tools, system or content block", []string{"cache_control", "type", "text"}}
	// cacheFields: a cache_control object.
	cacheFields = &fields{"a cache_control object", []string{"ttl"}}
)

const (
	fModel = iota
	fStream
	fMaxTokens
	fTools
	fSystem
	fMessages
	fCacheControl
	fMetadata
)

const (
	fRole = iota
	fContent
)

const (
	fBlockCacheControl = iota
	fType
	fText
)

// A NameError refuses a body in which a member Parse reads appears twice,
// or is named so that only a decoder that ignores case reads it.
type NameError struct {
	Where   string // the object: "the body", "metadata", "a message", ...
	Name    string // the member Parse reads
	Spelled string // the offending member's name as the body spells it, quoted
	Twice   bool   // Name appears twice (the second time as Spelled); else Spelled differs from it in case or padding
	Padded  bool   // Spelled is Name (but for case) with a NUL, space or control character some decoders drop
}

func (e *NameError) Error() string {
	if e.Padded {
		return fmt.Sprintf("%s has a member spelled %s, which decoders that stop at a NUL or trim spaces read as %q and others take for another member, so sluice cannot check the one the API will use: name it exactly %q, once",
			e.Where, e.Spelled, e.Name, e.Name)
	}
	if e.Twice {
		return fmt.Sprintf("%s has the member %q twice (the second time spelled %s); JSON decoders differ on which one counts, so sluice cannot check the one the API will use: send %q once",
			e.Where, e.Name, e.Spelled, e.Name)
	}
	return fmt.Sprintf("%s has a member spelled %s, which decoders that ignore case read as %q and others ignore, so sluice cannot check the one the API will use: name it exactly %q, once",
		e.Where, e.Spelled, e.Name, e.Name)
}

// maxSpelled bounds the name a NameError quotes back.
const maxSpelled = 64

// check finds the member whose key is key (a valid JSON string, quotes
// included) among s's names, in an object where the members of s's names
// met so far are the bits of *seen. It returns the member's index, -1 when
// it is none of s's names, or an error when it repeats one or matches one
// only without regard to case.
func (s *fields) check(key []byte, seen *uint16) (int, error) {
	i, how := s.index(key[1 : len(key)-1])
	switch {
	case i < 0:
		return -1, nil
	case how != exact:
		return -1, s.refuse(i, key, false, how == padded)
	case *seen&(1<<i) != 0:
		return -1, s.refuse(i, key, true, false)
	}
	*seen |= 1 << i
	return i, nil
}

func (s *fields) refuse(i int, key []byte, twice, pad bool) error {
	spelled := strings.ToValidUTF8(string(key), "\uFFFD")
	if len(spelled) > maxSpelled {
		spelled = Cut(spelled, maxSpelled) + "…"
	}
	return &NameError{Where: s.where, Name: s.names[i], Spelled: spelled, Twice: twice, Padded: pad}
}

// match is how a member's name matches one Parse reads.
type match int

const (
	exact  match = iota
	folded       // only without regard to case, as encoding/json matches names
	padded       // only once cut at a NUL and trimmed of spaces and control characters
)

// index is the index of the name that raw (the inside of a JSON string)
// decodes to, and how it matches; -1 when it matches none.
func (s *fields) index(raw []byte) (int, match) {
	for i, n := range s.names {
		if string(raw) == n {
			return i, exact // nearly every member: no escape, exact
		}
	}
	if plain(raw) {
		// ASCII alone folds to an ASCII name only as ASCII letters do,
		// and holds no NUL or control character (JSON escapes them).
		for i, n := range s.names {
			if asciiEqualFold(raw, n) {
				return i, folded
			}
		}
		if t := bytes.Trim(raw, " "); len(t) < len(raw) {
			for i, n := range s.names {
				if asciiEqualFold(t, n) {
					return i, padded
				}
			}
		}
		return -1, exact
	}
	var buf [maxName]byte
	name, ok := decodeName(raw, buf[:0])
	if !ok {
		// Too long to be a name Parse reads, unless a NUL in its first
		// bytes ends it for a decoder of C strings.
		if i := bytes.IndexByte(name, 0); i >= 0 {
			return s.padded(name[:i])
		}
		return -1, exact
	}
	for i, n := range s.names {
		if string(name) == n {
			return i, exact
		}
	}
	for i, n := range s.names {
		if bytes.EqualFold(name, []byte(n)) {
			return i, folded
		}
	}
	if t := unpadded(name); len(t) < len(name) {
		return s.padded(t)
	}
	return -1, exact
}

// padded is the index of the name t, unpadded, matches without regard to
// case; -1 when none.
func (s *fields) padded(t []byte) (int, match) {
	t = unpadded(t)
	for i, n := range s.names {
		if bytes.EqualFold(t, []byte(n)) {
			return i, padded
		}
	}
	return -1, exact
}

// unpadded is name cut at its first NUL, as a decoder of C strings reads
// it, and trimmed of the spaces, control and format characters (a
// zero-width space, a byte-order mark) some decoders drop.
func unpadded(name []byte) []byte {
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	return bytes.TrimFunc(name, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	})
}

// maxName bounds a decoded name that can match one Parse reads: those
// are ASCII, of at most 13 bytes, and a character that folds to an ASCII
// letter takes at most 3 bytes (K, the Kelvin sign).
const maxName = 64

// plain tells whether raw is ASCII without an escape: a name that decodes
// as itself.
func plain(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// asciiEqualFold tells whether the ASCII raw and name, in lower case,
// are equal without regard to the case of ASCII letters.
func asciiEqualFold(raw []byte, name string) bool {
	if len(raw) != len(name) {
		return false
	}
	for i, c := range raw {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}

// decodeName appends to out the inside of a valid JSON string, raw,
// decoded as encoding/json decodes it (escapes resolved, a lone surrogate
// or a byte that is not UTF-8 replaced by U+FFFD); false when it would
// take more than maxName bytes.
func decodeName(raw, out []byte) ([]byte, bool) {
	for i := 0; i < len(raw); {
		if len(out) > maxName-utf8.UTFMax {
			return out, false
		}
		c := raw[i]
		switch {
		case c == '\\' && raw[i+1] == 'u':
			var r rune
			r, i = escapedRune(raw, i)
			out = utf8.AppendRune(out, r)
		case c == '\\':
			out = append(out, unescape(raw[i+1]))
			i += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			out = utf8.AppendRune(out, r) // U+FFFD for a byte that is not UTF-8
			i += size
		}
	}
	return out, true
}

// unescape is the byte a one-character escape \c stands for.
func unescape(c byte) byte {
	switch c {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return c // '"', '\\', '/'
}
