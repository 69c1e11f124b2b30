package sim

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/request"
)

// convo builds a Messages body: a 2,400-token system prompt and the given
// messages (JSON), with an optional top-level cache_control.
func convo(auto string, messages ...string) string {
	b := `{"model":"claude-sonnet-4-5","max_tokens":50,`
	if auto != "" {
		b += `"cache_control":` + auto + `,`
	}
	return b + `"system":[{"type":"text","text":"` + strings.Repeat("rule ", 1920) + `"}],"messages":[` + strings.Join(messages, ",") + `]}`
}

const bp = `,"cache_control":{"type":"ephemeral"}`

func userText(text, cc string) string {
	return `{"role":"user","content":[{"type":"text","text":"` + text + `"` + cc + `}]}`
}

func asstText(text string) string {
	return `{"role":"assistant","content":[{"type":"text","text":"` + text + `"}]}`
}

// textBlocks is one user message of n text blocks, "b<from>" to
// "b<from+n-1>", the last with cc.
func textBlocks(from, n int, cc string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = `{"type":"text","text":"block ` + strconv.Itoa(from+i) + ` ` + strings.Repeat("x", 40) + `"}`
	}
	parts[n-1] = strings.TrimSuffix(parts[n-1], "}") + cc + "}"
	return `{"role":"user","content":[` + strings.Join(parts, ",") + `]}`
}

func usageOf(t *testing.T, s *Server, body string, hdr ...string) decoded {
	t.Helper()
	w := call(s, "POST", "/v1/messages", body, hdr...)
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	return decode(t, w)
}

// The repro: a conversation whose one breakpoint rolls forward
// two blocks reads the previous turn's prefix, found by the lookback, and
// writes only what is new. Before the lookback the simulator wrote the
// whole prompt again and read nothing.
func TestLookbackReadsPreviousTurn(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	t1 := usageOf(t, s, convo("", userText("Read the README.", bp)))
	if t1.Usage.CacheCreation < 2400 || t1.Usage.CacheRead != 0 {
		t.Fatalf("turn 1: %+v; want a write of the whole prompt", t1.Usage)
	}
	turn2 := convo("", userText("Read the README.", ""), asstText(strings.Repeat("It says hello. ", 60)), userText("Now summarise it.", bp))
	t2 := usageOf(t, s, turn2)
	var total int
	if err := json.Unmarshal(call(s, "POST", "/v1/messages/count_tokens", turn2).Body.Bytes(), &struct {
		N *int `json:"input_tokens"`
	}{&total}); err != nil {
		t.Fatal(err)
	}
	if t2.Usage.CacheRead != t1.Usage.CacheCreation || t2.Usage.CacheCreation != total-t1.Usage.CacheCreation || t2.Usage.InputTokens != 0 {
		t.Errorf("turn 2: %+v; want a read of turn 1's %d tokens and a write of the other %d", t2.Usage, t1.Usage.CacheCreation, total-t1.Usage.CacheCreation)
	}
}

// The window is 20 positions counting the breakpoint itself: an entry 19
// positions back is found, one 20 back is not, and a second breakpoint
// starts a second window that finds it.
func TestLookbackWindowIsTwentyPositions(t *testing.T) {
	for _, c := range []struct {
		name  string
		later []string // the messages after the first request's
		read  bool
	}{
		{"19 positions back", []string{textBlocks(6, 19, bp)}, true},
		{"20 positions back", []string{textBlocks(6, 20, bp)}, false},
		{"20 back, a second breakpoint 10 back", []string{textBlocks(6, 10, bp), textBlocks(16, 10, bp)}, true},
	} {
		s := New(Config{})
		first := textBlocks(1, 5, bp)
		w := usageOf(t, s, convo("", first))
		d := usageOf(t, s, convo("", append([]string{textBlocks(1, 5, "")}, c.later...)...))
		if got := d.Usage.CacheRead == w.Usage.CacheCreation; got != c.read || (!c.read && d.Usage.CacheRead != 0) {
			t.Errorf("%s: usage %+v; want a read of %d: %v", c.name, d.Usage, w.Usage.CacheCreation, c.read)
		}
		s.Close()
	}
}

// A run of consecutive tool_use blocks is one position, and so is a run of
// tool_result blocks: a turn of 25 parallel tool calls does not push the
// previous entry out of the window; 25 text blocks do.
func TestLookbackToolRunsAreOnePosition(t *testing.T) {
	uses, results := make([]string, 25), make([]string, 25)
	for i := range uses {
		id := `"toolu_` + strconv.Itoa(i) + `"`
		uses[i] = `{"type":"tool_use","id":` + id + `,"name":"Read","input":{"path":"f` + strconv.Itoa(i) + `"}}`
		results[i] = `{"type":"tool_result","tool_use_id":` + id + `,"content":"contents of file ` + strconv.Itoa(i) + `"}`
	}
	results[24] = strings.TrimSuffix(results[24], "}") + bp + "}"
	s := New(Config{})
	defer s.Close()
	w := usageOf(t, s, convo("", userText("Read every file.", bp)))
	tools := usageOf(t, s, convo("", userText("Read every file.", ""),
		`{"role":"assistant","content":[`+strings.Join(uses, ",")+`]}`,
		`{"role":"user","content":[`+strings.Join(results, ",")+`]}`))
	if tools.Usage.CacheRead != w.Usage.CacheCreation {
		t.Errorf("after 25 parallel tool calls: %+v; want a read of %d", tools.Usage, w.Usage.CacheCreation)
	}
	text := usageOf(t, s, convo("", userText("Read every file.", ""), textBlocks(1, 25, bp)))
	if text.Usage.CacheRead != 0 {
		t.Errorf("after 25 text blocks: %+v; want no read (out of the window)", text.Usage)
	}
}

// Writes happen only at breakpoints: the lookback does not find stable
// content behind a breakpoint on content that changes every request (the
// prompt-caching page's "common mistake").
func TestLookbackFindsOnlyWrittenEntries(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	for i, q := range []string{"What time is it? 10:01", "What time is it? 10:02"} {
		if d := usageOf(t, s, convo("", userText(q, bp))); d.Usage.CacheRead != 0 {
			t.Errorf("request %d: %+v; want no read: no request wrote the system prompt alone", i, d.Usage)
		}
	}
}

// Automatic caching: the top-level cache_control goes on the last
// cacheable block and moves forward with the conversation, so each turn
// reads the last and writes what is new.
func TestAutomaticCachingMovesWithTheConversation(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	auto := `{"type":"ephemeral"}`
	msgs := []string{userText("one", "")}
	prev := usageOf(t, s, convo(auto, msgs...))
	if prev.Usage.CacheCreation == 0 || prev.Usage.InputTokens != 0 {
		t.Fatalf("turn 1: %+v; want the whole prompt written", prev.Usage)
	}
	for turn := 2; turn <= 4; turn++ {
		msgs = append(msgs, asstText("answer "+strconv.Itoa(turn)), userText("question "+strconv.Itoa(turn), ""))
		d := usageOf(t, s, convo(auto, msgs...))
		if want := prev.Usage.CacheRead + prev.Usage.CacheCreation; d.Usage.CacheRead != want || d.Usage.CacheCreation == 0 || d.Usage.InputTokens != 0 {
			t.Errorf("turn %d: %+v; want a read of the %d tokens turn %d cached and a write of the rest", turn, d.Usage, want, turn-1)
		}
		prev = d
	}
	// The last cacheable block: an empty text block cannot take it.
	withEmpty := convo(auto, userText("one", ""), `{"role":"user","content":[{"type":"text","text":""}]}`)
	if d := usageOf(t, s, withEmpty); d.Usage.CacheRead == 0 || d.Usage.CacheCreation != 0 {
		t.Errorf("last block empty: %+v; want the breakpoint on the block before, already cached", d.Usage)
	}
	// The same ttl on the last block is one breakpoint; another ttl is a 400.
	if d := usageOf(t, s, convo(auto, userText("one", bp))); d.Usage.CacheRead == 0 {
		t.Errorf("explicit marker on the last block too: %+v; want a read", d.Usage)
	}
	wantError(t, call(s, "POST", "/v1/messages", convo(`{"type":"ephemeral","ttl":"1h"}`, userText("one", bp))), 400, "invalid_request_error", "ttl")
	// With 4 explicit breakpoints there is no slot left for automatic caching.
	four := convo(auto, userText("a", bp), userText("b", bp), userText("c", bp), userText("d", bp), userText("e", ""))
	wantError(t, call(s, "POST", "/v1/messages", four), 400, "invalid_request_error", "maximum of 4")
}

// Keys of one workspace share a cache; a key in none is a workspace of its
// own.
func TestWorkspacesShareACache(t *testing.T) {
	hash := func(key string) string { return request.Tenant(map[string][]string{"X-Api-Key": {key}}) }
	s := New(Config{Workspaces: []Workspace{{Name: "team", Credentials: []string{hash("sk-a"), hash("sk-b")}}}})
	defer s.Close()
	body := cachedBody("", "q")
	for _, c := range []struct {
		key  string
		read bool
	}{{"sk-a", false}, {"sk-b", true}, {"sk-c", false}, {"sk-a", true}} {
		if d := usageOf(t, s, body, "x-api-key", c.key); (d.Usage.CacheRead > 0) != c.read {
			t.Errorf("%s: %+v; want a read: %v", c.key, d.Usage, c.read)
		}
	}
	var l workspaceList
	if err := l.Set("team=" + hash("sk-a") + "+" + hash("sk-b") + ",solo=" + hash("sk-c")); err != nil || len(l) != 2 || len(l[0].Credentials) != 2 {
		t.Errorf("--workspaces: %v, %+v", err, l)
	}
	for _, bad := range []string{"team", "=abc", "a=x,b=x"} {
		if err := l.Set(bad); err == nil {
			t.Errorf("--workspaces %q: no error", bad)
		}
	}
}
