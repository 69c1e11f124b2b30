package request

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	p := prompt{h: sha256.New(), readTo: -1, lastCacheable: -1}
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
	d.Reads = p.reads
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
