package proxy

import (
	"strings"
	"testing"
)

// A key allowed only claude-haiku-* cannot reach another model by naming
// model twice, with escapes or in another case, nor hide stream or
// max_tokens so: the body is refused with a 400 that names the member,
// and the upstream is never called (issue 23, item 1).
func TestAmbiguousMemberNamesAreRefusedBeforeTheUpstream(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		f := startInbound(t, windowed, keyEntry("haiku-only", `"models":["claude-haiku-*"]`))
		const msgs = `"max_tokens":64,"messages":[{"role":"user","content":"hi"}]`
		for _, tc := range []struct{ body, member string }{
			{`{"model":"claude-haiku-4-5","mode\u006c":"claude-opus-4-1",` + msgs + `}`, "model"},
			{`{"model":"claude-haiku-4-5","Model":"claude-opus-4-1",` + msgs + `}`, "model"},
			{`{"model":"claude-haiku-4-5","model":"claude-opus-4-1",` + msgs + `}`, "model"},
			{`{"Model":"claude-opus-4-1","model":"claude-haiku-4-5",` + msgs + `}`, "model"},
			{`{"model":"claude-haiku-4-5","stream":false,"strea\u006d":true,` + msgs + `}`, "stream"},
			{`{"model":"claude-haiku-4-5","max_tokens":1,"MAX_TOKENS":64000,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
			{`{"model":"claude-haiku-4-5",` + msgs + `,"metadata":{"user_id":"a","user_i\u0064":"b"}}`, "user_id"},
			// A NUL ends a name for a decoder of C strings; others trim a
			// name's spaces (issue 37, item 8).
			{`{"model":"claude-haiku-4-5","model\u0000":"claude-opus-4-1",` + msgs + `}`, "model"},
			{`{"model":"claude-haiku-4-5","model ":"claude-opus-4-1",` + msgs + `}`, "model"},
			{`{"model":"claude-haiku-4-5","model\u0000x":"claude-opus-4-1",` + msgs + `}`, "model"},
			{`{"model":"claude-haiku-4-5","\tmodel":"claude-opus-4-1",` + msgs + `}`, "model"},
		} {
			status, body := send(t, "POST", f.url+"/v1/messages", tc.body, "x-api-key", sluiceKey("haiku-only"))
			if status != 400 || errorType(t, body) != "invalid_request_error" || !strings.Contains(body, `\"`+tc.member+`\"`) {
				t.Errorf("%s: %d %s; want 400 invalid_request_error naming %q", tc.body, status, body, tc.member)
			}
		}
		if n := f.sim.Stats().Requests; n != 0 {
			t.Errorf("%d requests reached the upstream; want none", n)
		}
		// A name spelled with escapes alone is that name, as the upstream
		// reads it: allowed, or refused, by what it names.
		for body, want := range map[string]int{
			`{"mode\u006c":"claude-haiku-4-5",` + msgs + `}`: 200,
			`{"mode\u006c":"claude-opus-4-1",` + msgs + `}`:  403,
		} {
			if status, answer := send(t, "POST", f.url+"/v1/messages", body, "x-api-key", sluiceKey("haiku-only")); status != want {
				t.Errorf("%s: %d %s; want %d", body, status, answer, want)
			}
		}
		if n := f.sim.Stats().Requests; n != 1 {
			t.Errorf("%d requests reached the upstream; want the allowed one", n)
		}
	})
}
