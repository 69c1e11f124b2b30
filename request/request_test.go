package request

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// parse parses body with no headers, failing the test on a refusal.
func parse(t *testing.T, body string) Descriptor {
	t.Helper()
	d, err := Parse([]byte(body), nil)
	if err != nil {
		t.Fatalf("Parse(%s): %v", body, err)
	}
	return d
}

// body builds a Messages body from its parts, each raw JSON or "" to leave
// it out.
func body(model, tools, system, messages, extra string) string {
	parts := []string{`"model":` + model, `"max_tokens":1024`}
	for _, kv := range [][2]string{{"tools", tools}, {"system", system}, {"messages", messages}} {
		if kv[1] != "" {
			parts = append(parts, `"`+kv[0]+`":`+kv[1])
		}
	}
	if extra != "" {
		parts = append(parts, extra)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

const (
	model    = `"claude-sonnet-4-5"`
	weather  = `{"name":"get_weather","description":"Weather at a place","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}`
	clock    = `{"name":"get_time","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}}`
	tools    = `[` + weather + `,` + clock + `]`
	system   = `[{"type":"text","text":"You are terse."},{"type":"text","text":"Answer in French.","cache_control":{"type":"ephemeral","ttl":"1h"}}]`
	question = `{"role":"user","content":[{"type":"text","text":"Weather in Paris?","cache_control":{"type":"ephemeral"}}]}`
)

func TestPrefixesInAPIOrder(t *testing.T) {
	d := parse(t, body(model, tools, system, `[`+question+`]`, ""))
	if len(d.Prefixes) != 3 {
		t.Fatalf("got %d prefixes; want 3 (tool, system, message): %+v", len(d.Prefixes), d.Prefixes)
	}
	want := []time.Duration{5 * time.Minute, time.Hour, 5 * time.Minute}
	for i, p := range d.Prefixes {
		if p.TTL != want[i] {
			t.Errorf("prefix %d TTL = %v; want %v", i, p.TTL, want[i])
		}
		if i > 0 && (p.Tokens <= d.Prefixes[i-1].Tokens || p.Key == d.Prefixes[i-1].Key) {
			t.Errorf("prefix %d = %+v does not extend prefix %d = %+v", i, p, i-1, d.Prefixes[i-1])
		}
	}
	if last := d.Prefixes[2]; last.Tokens != d.Cost.InputTokens {
		t.Errorf("the breakpoint on the last block covers %d tokens; the prompt has %d", last.Tokens, d.Cost.InputTokens)
	}

	// The order of the body's members does not matter: the API's prefix
	// runs tools, system, messages.
	reordered := `{"messages":[` + question + `],"system":` + system + `,"max_tokens":1024,"tools":` + tools + `,"model":` + model + `}`
	if got := parse(t, reordered).Prefixes; fmt.Sprint(got) != fmt.Sprint(d.Prefixes) {
		t.Errorf("members reordered: prefixes %+v; want %+v", got, d.Prefixes)
	}
}

func TestSharedPrefixAcrossRequests(t *testing.T) {
	later := func(q string) string {
		return `[{"role":"user","content":[{"type":"text","text":"` + q + `","cache_control":{"type":"ephemeral"}}]}]`
	}
	a := parse(t, body(model, tools, system, later("Weather in Paris?"), ""))
	b := parse(t, body(model, tools, system, later("And in Rome, tomorrow?"), ""))
	for i := range 2 {
		if a.Prefixes[i] != b.Prefixes[i] {
			t.Errorf("prefix %d: %+v and %+v; want equal (the tools and system are the same)", i, a.Prefixes[i], b.Prefixes[i])
		}
	}
	if a.Prefixes[2].Key == b.Prefixes[2].Key {
		t.Errorf("different questions share the key %x", a.Prefixes[2].Key)
	}
}

func TestModelsNeverShareAKey(t *testing.T) {
	a := parse(t, body(model, tools, system, `[`+question+`]`, ""))
	b := parse(t, body(`"claude-haiku-4-5"`, tools, system, `[`+question+`]`, ""))
	for i := range a.Prefixes {
		if a.Prefixes[i].Key == b.Prefixes[i].Key {
			t.Errorf("prefix %d: two models share the key %x", i, a.Prefixes[i].Key)
		}
	}
}

func TestChangedToolChangesEveryKey(t *testing.T) {
	a := parse(t, body(model, tools, system, `[`+question+`]`, ""))
	changed := strings.Replace(tools, "Weather at a place", "Weather at a city", 1)
	b := parse(t, body(model, changed, system, `[`+question+`]`, ""))
	for i := range a.Prefixes {
		if a.Prefixes[i].Key == b.Prefixes[i].Key {
			t.Errorf("prefix %d keeps the key %x after a tool definition changed", i, a.Prefixes[i].Key)
		}
	}
}

// The cache_control markers are not part of the prompt: moving a
// breakpoint or changing its TTL leaves the keys of the content alone.
func TestMarkersAreNotContent(t *testing.T) {
	a := parse(t, body(model, tools, system, `[`+question+`]`, ""))
	unmarked := strings.Replace(system, `,"cache_control":{"type":"ephemeral","ttl":"1h"}`, "", 1)
	b := parse(t, body(model, tools, unmarked, `[`+question+`]`, ""))
	if len(b.Prefixes) != 2 {
		t.Fatalf("got %d prefixes; want 2", len(b.Prefixes))
	}
	if a.Prefixes[2] != b.Prefixes[1] {
		t.Errorf("the message's prefix is %+v with a breakpoint on the system and %+v without; want equal", a.Prefixes[2], b.Prefixes[1])
	}
	short := strings.Replace(system, `"ttl":"1h"`, `"ttl":"5m"`, 1)
	c := parse(t, body(model, tools, short, `[`+question+`]`, ""))
	if c.Prefixes[1].Key != a.Prefixes[1].Key || c.Prefixes[1].TTL != 5*time.Minute {
		t.Errorf("ttl 5m: prefix %+v; want %+v with TTL 5m", c.Prefixes[1], a.Prefixes[1])
	}
}

func TestAutomaticCaching(t *testing.T) {
	plain := `[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":"Sunny."},{"role":"user","content":[{"type":"text","text":"Rome?"}]}]`
	marked := strings.Replace(plain, `"Rome?"}`, `"Rome?","cache_control":{"type":"ephemeral"}}`, 1)
	auto := parse(t, body(model, tools, system, plain, `"cache_control":{"type":"ephemeral","ttl":"1h"}`))
	block := parse(t, body(model, tools, system, marked, ""))
	if len(auto.Prefixes) != 3 {
		t.Fatalf("got %d prefixes; want 3 (tool, system, automatic)", len(auto.Prefixes))
	}
	if a, b := auto.Prefixes[2], block.Prefixes[2]; a.Key != b.Key || a.Tokens != b.Tokens || a.TTL != time.Hour {
		t.Errorf("automatic breakpoint %+v; want the last block's %+v with TTL 1h", a, b)
	}
	// A last block with its own marker stays one breakpoint.
	both := parse(t, body(model, tools, system, marked, `"cache_control":{"type":"ephemeral"}`))
	if len(both.Prefixes) != 3 {
		t.Errorf("got %d prefixes; want 3", len(both.Prefixes))
	}
	// Top-level caching on a prompt of only a system string.
	if d := parse(t, body(model, "", `"Be terse."`, "", `"cache_control":{"type":"ephemeral"}`)); len(d.Prefixes) != 1 || d.Prefixes[0].TTL != 5*time.Minute {
		t.Errorf("system only: prefixes %+v; want one of TTL 5m", d.Prefixes)
	}
	if d := parse(t, body(model, "", "", "", `"cache_control":null`)); d.Prefixes != nil {
		t.Errorf("cache_control null: prefixes %+v; want none", d.Prefixes)
	}
}

func TestNoCacheControlNoPrefixes(t *testing.T) {
	d := parse(t, body(model, `[`+weather+`]`, `"Be terse."`, `[{"role":"user","content":"Hi"}]`, ""))
	if d.Prefixes != nil {
		t.Errorf("prefixes %+v; want none", d.Prefixes)
	}
	if d.Cost.InputTokens < 3 || d.Cost.MaxTokens != 1024 {
		t.Errorf("cost %+v; want max_tokens 1024 and a token per block at least", d.Cost)
	}
}

// A string system prompt, or content, is the one text block it stands for.
func TestStringIsOneTextBlock(t *testing.T) {
	msgs := `[` + question + `]`
	a := parse(t, body(model, "", `"You are terse."`, msgs, ""))
	b := parse(t, body(model, "", `[{"type":"text","text":"You are terse."}]`, msgs, ""))
	if fmt.Sprint(a.Prefixes) != fmt.Sprint(b.Prefixes) || a.Cost != b.Cost {
		t.Errorf("system as a string: %+v; as a block: %+v; want equal", a, b)
	}
	c := parse(t, body(model, "", `[{"type":"text","text":"You are not terse."}]`, msgs, ""))
	if c.Prefixes[0].Key == a.Prefixes[0].Key {
		t.Errorf("two system prompts share the key %x", a.Prefixes[0].Key)
	}
}

// A message's role is part of the prefix even when the body sends it after
// the content, as the Go SDK does.
func TestRoleAfterContent(t *testing.T) {
	content := `[{"type":"text","text":"Hi","cache_control":{"type":"ephemeral"}}]`
	first := parse(t, body(model, "", "", `[{"role":"user","content":`+content+`}]`, ""))
	after := parse(t, body(model, "", "", `[{"content":`+content+`,"role":"user"}]`, ""))
	other := parse(t, body(model, "", "", `[{"content":`+content+`,"role":"assistant"}]`, ""))
	if first.Prefixes[0] != after.Prefixes[0] {
		t.Errorf("role first: %+v; role after: %+v; want equal", first.Prefixes[0], after.Prefixes[0])
	}
	if other.Prefixes[0].Key == after.Prefixes[0].Key {
		t.Errorf("user and assistant share the key %x", other.Prefixes[0].Key)
	}
}

func TestAtMostFourPrefixes(t *testing.T) {
	block := `{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}`
	d := parse(t, body(model, "", "["+strings.Repeat(block+",", 5)+block+"]", "", ""))
	if len(d.Prefixes) != MaxPrefixes {
		t.Errorf("got %d prefixes; want the first %d", len(d.Prefixes), MaxPrefixes)
	}
	if d.Prefixes[3].Tokens != 4 {
		t.Errorf("the fourth prefix has %d tokens; want 4 (the first four blocks)", d.Prefixes[3].Tokens)
	}
}

// Tokens are estimated as the simulator estimates them: four bytes of
// decoded text per token, per block.
func TestTokenEstimate(t *testing.T) {
	text := strings.Repeat("abcd", 100) // 100 tokens
	const image = `{"type":"image","source":{"type":"base64","data":"AAAA"}}`
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"system string", body(model, "", `"`+text+`"`, "", ""), 100},
		{"text block", body(model, "", "", `[{"role":"user","content":[{"type":"text","text":"`+text+`"}]}]`, ""), 100},
		{"escapes decoded", body(model, "", "", `[{"role":"user","content":"\n\n\n\n\u00e9\u00e9\ud83d\ude00"}]`, ""), 3}, // 4 + 4 + 4 bytes
		{"other block whole", body(model, "", "", `[{"role":"user","content":[`+image+`]}]`, ""), EstimateTokens(len(image))},
		{"tool whole", body(model, `[`+weather+`]`, "", "", ""), EstimateTokens(len(weather))},
		{"empty prompt", `{}`, 1},
		{"three blocks", body(model, "", "", `[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":""}]`, ""), 3},
	} {
		if got := parse(t, tc.body).Cost.InputTokens; got != tc.want {
			t.Errorf("%s: %d input tokens; want %d", tc.name, got, tc.want)
		}
	}
}

func TestTextLen(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{`""`, 0}, {`"abc"`, 3}, {`"a\nb"`, 3}, {`"\u00e9"`, 2}, {`"\u20ac"`, 3},
		{`"\ud83d\ude00"`, 4}, {`"\ud83d"`, 3}, {`"\ud83dx"`, 4}, {"\"\xff\"", 3}, {`"é"`, 2},
	} {
		var s string
		if err := json.Unmarshal([]byte(tc.in), &s); err != nil || len(s) != tc.want {
			t.Fatalf("encoding/json decodes %s to %d bytes (%v); the test wants %d", tc.in, len(s), err, tc.want)
		}
		if got := textLen([]byte(tc.in)); got != tc.want {
			t.Errorf("textLen(%s) = %d; want %d", tc.in, got, tc.want)
		}
	}
}

func TestScalars(t *testing.T) {
	for _, tc := range []struct {
		body   string
		model  string
		stream bool
		max    int
	}{
		{`{"model":"m","stream":true,"max_tokens":64000}`, "m", true, 64000},
		{`{"model":5,"stream":"yes","max_tokens":"64"}`, "", false, 0},
		{`{"model":"caf\u00e9","max_tokens":1.5}`, "café", false, 0},
		{`{"stream":null,"max_tokens":-1}`, "", false, 0},
		{`{"mode\u006c":"m","\u0073tream":true,"max_token\u0073":7}`, "m", true, 7}, // names decoded
		{`{"models":"a","model_":"b","model":"m"}`, "m", false, 0},
		{`{"model":"` + strings.Repeat("x", 300) + `"}`, strings.Repeat("x", 128), false, 0},
	} {
		d := parse(t, tc.body)
		if d.Model != tc.model || d.Stream != tc.stream || d.Cost.MaxTokens != tc.max {
			t.Errorf("Parse(%s) = model %q stream %v max_tokens %d; want %q %v %d",
				tc.body, d.Model, d.Stream, d.Cost.MaxTokens, tc.model, tc.stream, tc.max)
		}
	}
}

func TestTenant(t *testing.T) {
	const key = "sk-ant-api03-secret"
	byKey := http.Header{"X-Api-Key": {key}}
	byBearer := http.Header{"Authorization": {"Bearer " + key}}
	d, err := Parse([]byte(`{}`), byKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Tenant) != 16 {
		t.Errorf("tenant %q; want 16 hex digits", d.Tenant)
	}
	if d.Key != d.Tenant {
		t.Errorf("key %q; want the credential's hash %q, the default tenant", d.Key, d.Tenant)
	}
	if got := Tenant(byBearer); got != d.Tenant {
		t.Errorf("the same key as a bearer token is tenant %q; as x-api-key %q", got, d.Tenant)
	}
	if got := Tenant(http.Header{"Authorization": {"bearer " + key}}); got != d.Tenant {
		t.Errorf("lower-case bearer: tenant %q; want %q", got, d.Tenant)
	}
	if got := Tenant(http.Header{"X-Api-Key": {key + "2"}}); got == d.Tenant {
		t.Errorf("two keys share the tenant %q", got)
	}
	for _, h := range []http.Header{nil, {"Authorization": {"Basic " + key}}, {"Authorization": {"Bearer "}}} {
		if got := Tenant(h); got != "" {
			t.Errorf("Tenant(%v) = %q; want none", h, got)
		}
	}
	for _, h := range []http.Header{byKey, byBearer} {
		d, _ := Parse([]byte(body(model, tools, system, `[`+question+`]`, "")), h)
		if s := fmt.Sprintf("%#v", d); strings.Contains(s, key) || strings.Contains(s, "secret") {
			t.Errorf("the credential reaches the descriptor: %s", s)
		}
	}
}

func TestPatience(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"": 0, "600": 10 * time.Minute, "0": 0, "-5": 0, "1.5": 0, "ten": 0,
		"9223372036854775807": 0, "9223372036": 9223372036 * time.Second,
	} {
		if got := Patience(http.Header{"X-Stainless-Timeout": {in}}); got != want {
			t.Errorf("x-stainless-timeout %q: patience %v; want %v", in, got, want)
		}
	}
}

func TestRefusals(t *testing.T) {
	for in, want := range map[string]error{
		"": ErrEmpty, " \r\n\t": ErrEmpty,
		"[]": ErrNotObject, "null": ErrNotObject, `"x"`: ErrNotObject, "\xff{}": ErrNotObject,
		"{": ErrInvalidJSON, `{"a":1}x`: ErrInvalidJSON, `{"a":1,}`: ErrInvalidJSON, `{"a":01}`: ErrInvalidJSON,
		`{"a":"\x"}`: ErrInvalidJSON, "{\"a\":\"\x01\"}": ErrInvalidJSON, `{"messages":[1,]}`: ErrInvalidJSON,
	} {
		if _, err := Parse([]byte(in), nil); !errors.Is(err, want) {
			t.Errorf("Parse(%q) = %v; want %v", in, err, want)
		}
	}
}

// Parse accepts exactly the objects encoding/json accepts.
func TestValidityAsEncodingJSON(t *testing.T) {
	deep := func(n int) string { return `{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}` }
	cases := []string{
		`{}`, ` {} `, `{"a":-0.5e+10}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`, `{"a":.5}`, `{"a":-01}`, `{"a":1E-0}`,
		`{"a":"\u12"}`, `{"a":"\u12G4"}`, `{"a":"\/\b\f\n\r\t\"\\"}`, "{\"a\":\"\xff\xfe\"}", `{"a":tru}`, `{"a":nul}`,
		`{"a" 1}`, `{a:1}`, `{"a":1 "b":2}`, `{"a":[1 2]}`, `{"a":{}}`, `{"a":[]}`, `{"a":[[],{}]}`, `{"a":1}}`,
		"{\"a\":1}\x00", `{"a":1,`, `{"a":[1,`, `{"a":[1, `, `{"a":1 ,`, `{"a":"b"`, `{"a"`, `{"a":`, `{"`, deep(maxDepth), deep(maxDepth + 1),
	}
	for _, in := range cases {
		var obj map[string]json.RawMessage
		want := json.Unmarshal([]byte(in), &obj) == nil
		if _, err := Parse([]byte(in), nil); (err == nil) != want {
			t.Errorf("Parse(%.40q) = %v; encoding/json accepts it: %v", in, err, want)
		}
	}
}

func TestUserID(t *testing.T) {
	for body, want := range map[string]string{
		`{"metadata":{"user_id":"u-42"}}`:                             "u-42",
		`{"metadata":{"user_i\u0064":"caf\u00e9"}}`:                   "café",
		`{"metadata":{"user_id":7}}`:                                  "",
		`{"metadata":"u"}`:                                            "",
		`{"metadata":{"user_id":"` + strings.Repeat("x", 300) + `"}}`: strings.Repeat("x", MaxUserID),
	} {
		if got := parse(t, body).UserID; got != want {
			t.Errorf("Parse(%.60s) user id %q; want %q", body, got, want)
		}
	}
}

// A member Parse reads that appears twice, or is named as one but for
// case, is refused: decoders differ on which member counts, and sluice
// must check what the upstream reads (issue 23).
func TestAmbiguousNames(t *testing.T) {
	for _, tc := range []struct {
		body, name string
		twice      bool
	}{
		{`{"model":"claude-haiku-4-5","mode\u006c":"claude-opus-4-1","max_tokens":8}`, "model", true},
		{`{"model":"claude-haiku-4-5","Model":"claude-opus-4-1"}`, "model", false},
		{`{"Model":"claude-opus-4-1"}`, "model", false},
		{`{"MODE\u004c":"claude-opus-4-1"}`, "model", false},
		{`{"model":"a","model":"a"}`, "model", true},
		{`{"stream":false,"strea\u006d":true}`, "stream", true},
		{`{"stream":false,"\u017ftream":true}`, "stream", false}, // ſ folds to s, as encoding/json matches names
		{`{"max_tokens":1,"MAX_TOKENS":64000}`, "max_tokens", false},
		{`{"max_to\u212aens":5}`, "max_tokens", false}, // the Kelvin sign folds to k
		{`{"max_tokens":1,"max_tokens":64000}`, "max_tokens", true},
		{`{"system":"a","System":"b"}`, "system", false},
		{`{"tools":[],"tools":[]}`, "tools", true},
		{`{"messages":[],"messageS":[]}`, "messages", false},
		{`{"cache_control":{},"cache_control":{"type":"ephemeral"}}`, "cache_control", true},
		{`{"metadata":{"user_id":"a"},"metadata":{"user_id":"b"}}`, "metadata", true},
		{`{"metadata":{"user_id":"a","user_id":"b"}}`, "user_id", true},
		{`{"metadata":{"User_ID":"u"}}`, "user_id", false},
		{`{"messages":[{"role":"user","role":"assistant","content":"a"}]}`, "role", true},
		{`{"messages":[{"role":"user","content":"a","Content":"b"}]}`, "content", false},
		{`{"messages":[{"content":"a","conten\u0074":"b","role":"user"}]}`, "content", true},
		{`{"system":[{"type":"text","text":"a","tex\u0074":"b"}]}`, "text", true},
		{`{"messages":[{"role":"user","content":[{"type":"image","Type":"text"}]}]}`, "type", false},
		{`{"tools":[{"name":"t","cache_control":{},"Cache_Control":{}}]}`, "cache_control", false},
		{`{"tools":[{"name":"t","cache_control":{"ttl":"1h","TTL":"5m"}}]}`, "ttl", false},
		{`{"messages":[{"role":"user","content":"a"}],"cache_control":{"ttl":"5m","ttl":"1h"}}`, "ttl", true},
		// Names some decoders read as one Parse reads: a NUL ends a C
		// string, and some trim a name's spaces and control characters.
		{`{"model":"claude-haiku-4-5","model\u0000":"claude-opus-4-1"}`, "model", false},
		{`{"model":"claude-haiku-4-5","model ":"claude-opus-4-1"}`, "model", false},
		{`{"model ":"claude-opus-4-1"}`, "model", false},
		{`{" Model":"claude-opus-4-1"}`, "model", false},
		{`{"model\u0000x":"claude-opus-4-1"}`, "model", false},
		{`{"model\n":"claude-opus-4-1"}`, "model", false},
		{`{"stream\u00a0":true}`, "stream", false},
		{`{"metadata":{"user_id\u0000":"b"}}`, "user_id", false},
		{`{"model\u0000` + strings.Repeat("x", 100) + `":"claude-opus-4-1"}`, "model", false},
	} {
		d, err := Parse([]byte(tc.body), http.Header{"X-Api-Key": {"k"}})
		var ne *NameError
		if !errors.As(err, &ne) {
			t.Errorf("Parse(%s) = %v; want a NameError", tc.body, err)
			continue
		}
		if ne.Name != tc.name || ne.Twice != tc.twice {
			t.Errorf("Parse(%s): %+v; want member %q, twice %v", tc.body, ne, tc.name, tc.twice)
		}
		if msg := err.Error(); !strings.Contains(msg, `"`+tc.name+`"`) {
			t.Errorf("Parse(%s): %q does not name the member", tc.body, msg)
		}
		if d.Model != "" || d.Tenant == "" {
			t.Errorf("Parse(%s): descriptor %+v; want the headers' part alone", tc.body, d)
		}
	}
	// Names Parse does not read, anywhere, are the upstream's business.
	for _, body := range []string{
		`{"model":"m","Modelx":1,"mode":2,"MODEL_":3}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"tool_use","input":{"model":"x","Model":"y","model":"z"}}]}]}`,
		`{"model":"m","metadata":{"user_id":"u","extra":{"user_id":1,"User_ID":2}}}`,
		`{"model":"m","system":"say \"Model\":\"x\"","thinking":{"type":"enabled","Type":"x"}}`,
		`{"model":"m","\u006d\u006f\u0064\u0065\u006c\u0073":"x"}`,
	} {
		if d, err := Parse([]byte(body), nil); err != nil || d.Model != "m" {
			t.Errorf("Parse(%s) = model %q, %v; want m, accepted", body, d.Model, err)
		}
	}
}
