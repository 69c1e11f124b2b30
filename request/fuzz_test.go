package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Parse must read model, stream and max_tokens as encoding/json reads them
// into a struct (names decoded and matched without regard to case, the
// last of a repeated member counting), or refuse the body: wherever the
// two could differ, Parse refuses. It refuses a valid object only for an
// ambiguous name, and only when the body has one. Run in CI by executions
// (.ci/run).
func FuzzParseAsEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"model":"claude-haiku-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"claude-haiku-4-5","mode\u006c":"claude-opus-4-1","max_tokens":8}`,
		`{"model":"claude-haiku-4-5","Model":"claude-opus-4-1"}`,
		`{"stream":false,"strea\u006d":true}`, `{"\u017ftream":true}`, `{"max_to\u212aens":9}`,
		`{"max_tokens":1,"max_tokens":2}`, `{"MAX_TOKENS":3}`, `{"mode\u006C":"m"}`, `{"model":"\ud83d\ude00"}`,
		`{"metadata":{"user_id":"u","User_id":"v"}}`, `{"messages":[{"role":"user","content":[{"type":"text","text":"a","Text":"b"}]}]}`,
		`{"model":"a","model\u0000":"b"}`, `{"model ":"b"}`, `{"\u200bstream":true}`, `{"model\u0000` + strings.Repeat("x", 80) + `":"b"}`,
		`{"model":5,"stream":"yes","max_tokens":-1}`, `{"max_tokens":1e3}`, `{"max_tokens":99999999999}`, `{}`, `[]`, `{"a":1}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := Parse(body, nil)
		var want struct {
			Model     string
			Stream    bool
			MaxTokens int `json:"max_tokens"`
		}
		jerr := json.Unmarshal(body, &want)
		var te *json.UnmarshalTypeError
		valid := jerr == nil || errors.As(jerr, &te) // a type error leaves the other fields read
		isObject := valid && bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{"))
		var ne *NameError
		switch {
		case errors.As(err, &ne):
			if !isObject {
				t.Fatalf("Parse(%q) = %v; but encoding/json does not take it for an object (%v)", body, err, jerr)
			}
			if !ambiguous(body, ne.Name) {
				t.Fatalf("Parse(%q) = %v; but no object in it has %q twice or in another case", body, err, ne.Name)
			}
			return
		case err != nil:
			if isObject {
				t.Fatalf("Parse(%q) = %v; encoding/json reads it", body, err)
			}
			return
		case !isObject:
			t.Fatalf("Parse(%q) accepts it; encoding/json: %v", body, jerr)
		}
		want.Model = Cut(want.Model, maxModel)
		want.MaxTokens = min(max(want.MaxTokens, 0), maxCount)
		if d.Model != want.Model || d.Stream != want.Stream || d.Cost.MaxTokens != want.MaxTokens {
			t.Fatalf("Parse(%q) = model %q stream %v max_tokens %d; encoding/json reads %q %v %d",
				body, d.Model, d.Stream, d.Cost.MaxTokens, want.Model, want.Stream, want.MaxTokens)
		}
	})
}

// ambiguous tells whether some object in the JSON text body has two
// members whose decoded names fold to name, or one that folds to it
// without being it: read with encoding/json's own tokenizer.
func ambiguous(body []byte, name string) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type object struct{ count int }
	var stack []*object // nil for an array
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				stack = append(stack, &object{})
				expectKey = true
				continue
			case '[':
				stack = append(stack, nil)
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if expectKey {
				if strings.EqualFold(tok, name) {
					o := stack[len(stack)-1]
					o.count++
					if tok != name || o.count > 1 {
						return true
					}
				} else if strings.EqualFold(string(unpadded([]byte(tok))), name) {
					return true // "model\u0000", "model ": a decoder may read it as name
				}
				expectKey = false
				continue
			}
		}
		// A value ended (or a container began): in an object, a key is next.
		expectKey = len(stack) > 0 && stack[len(stack)-1] != nil && !isOpen(tok)
	}
}

func isOpen(tok json.Token) bool { return tok == json.Delim('{') || tok == json.Delim('[') }
