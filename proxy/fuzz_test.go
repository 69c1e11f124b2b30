package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sse"
)

// inspect must accept exactly the bodies that are JSON objects (but those
// that name a member it reads twice or in another case, which it refuses
// with a 400 naming the member: request.FuzzParseAsEncodingJSON checks
// when), never panic, read model, stream, max_tokens and
// metadata.user_id as encoding/json reads them from the object's members,
// and keep its prefixes within the API's bounds.
func FuzzInspect(f *testing.F) {
	for _, s := range []string{requestJSON, streamRequestJSON, "", " ", "[]", "{", `{"model":5}`, `{"stream":"yes"}`, " \n{}", `{"a":1}x`, "\xff{}",
		`{"metadata":{"user_id":"u-1"}}`, `{"metadata":{"user_id":"a","user_id":"b\u00e9"},"metadata":{"User_id":"c"}}`, `{"metadata":{"user_id":5}}`, `{"metadata":[{"user_id":"x"}]}`,
		`{"model":"m","cache_control":{"type":"ephemeral"},"tools":[{"name":"t","cache_control":{"ttl":"1h"}}],"system":"s","messages":[{"content":[{"type":"text","text":"\u00e9\ud83d","cache_control":{}}],"role":"user"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, _, aerr := inspect(body, http.Header{"X-Api-Key": {"sk-fuzz"}})
		var obj map[string]json.RawMessage
		isObject := json.Unmarshal(body, &obj) == nil && obj != nil
		var ne *request.NameError
		if _, err := request.Parse(body, nil); aerr != nil && errors.As(err, &ne) {
			if aerr.Status != http.StatusBadRequest || aerr.Type != "invalid_request_error" || !strings.Contains(aerr.Message, `"`+ne.Name+`"`) {
				t.Fatalf("inspect(%q) = %+v; want a 400 invalid_request_error", body, aerr)
			}
			return
		}
		if (aerr == nil) != isObject {
			t.Fatalf("inspect(%q) err = %v; JSON object = %v", body, aerr, isObject)
		}
		if aerr != nil {
			if aerr.Status != http.StatusBadRequest || aerr.Type != "invalid_request_error" {
				t.Fatalf("inspect(%q) = %+v; want a 400 invalid_request_error", body, aerr)
			}
			return
		}
		var want struct {
			model  string
			stream bool
			max    int
			user   string
		}
		var meta map[string]json.RawMessage
		if json.Unmarshal(obj["metadata"], &meta) == nil {
			_ = json.Unmarshal(meta["user_id"], &want.user)
		}
		if len(want.user) > request.MaxUserID {
			want.user = want.user[:request.MaxUserID]
		}
		_ = json.Unmarshal(obj["model"], &want.model)
		_ = json.Unmarshal(obj["stream"], &want.stream)
		if json.Unmarshal(obj["max_tokens"], &want.max) != nil || want.max < 0 {
			want.max = 0
		}
		if len(want.model) > 128 {
			want.model = want.model[:128]
		}
		if d.Model != want.model || d.Stream != want.stream || d.Cost.MaxTokens != want.max {
			t.Fatalf("inspect(%q) = model %q stream %v max_tokens %d; encoding/json reads %q %v %d",
				body, d.Model, d.Stream, d.Cost.MaxTokens, want.model, want.stream, want.max)
		}
		if d.UserID != want.user {
			t.Fatalf("inspect(%q) = metadata.user_id %q; encoding/json reads %q", body, d.UserID, want.user)
		}
		if len(d.Prefixes) > request.MaxPrefixes || d.Cost.InputTokens < 1 {
			t.Fatalf("inspect(%q): %d prefixes, %d input tokens", body, len(d.Prefixes), d.Cost.InputTokens)
		}
		for i, p := range d.Prefixes {
			if p.Tokens < 1 || p.Tokens > d.Cost.InputTokens || i > 0 && p.Tokens <= d.Prefixes[i-1].Tokens {
				t.Fatalf("inspect(%q): prefix %d of %d tokens; prefixes %+v, %d input tokens", body, i, p.Tokens, d.Prefixes, d.Cost.InputTokens)
			}
		}
	})
}

// The usage tally of a stream (streamUsage.observe) reads whatever
// events the upstream sends, as sse.Copy frames them (sse.FuzzCopyEvents
// checks the framing): it must never panic.
func FuzzStreamUsage(f *testing.F) {
	f.Add([]byte(strings.Join(sseEvents, "")))
	f.Add([]byte("event: message_start\ndata: {\"message\":null}\n\nevent: message_delta\ndata: {\"usage\":{\"output_tokens\":-1}}\n\n"))
	f.Add([]byte("event: message_delta\ndata:"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var tally streamUsage
		send := func(ev []byte, more bool) error { tally.observe(ev); return nil }
		if err := sse.Copy(send, iotest.HalfReader(bytes.NewReader(in)), func([]byte) {}); err != nil && err != sse.ErrEventTooLarge {
			t.Fatal(err)
		}
		tally.estimate()
	})
}
