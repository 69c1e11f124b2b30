package record

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// body is a Messages body with a tool, a system prompt of three blocks
// (an attribution line first) and two turns, secret text in every part.
func body(turn int) []byte {
	return fmt.Appendf(nil, `{"model":"claude-sonnet-4-5","max_tokens":128000,"stream":true,`+
		`"tools":[{"name":"SECRET_TOOL","description":"SECRET tool text","input_schema":{"type":"object"}}],`+
		`"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.a1b; cc_entrypoint=sdk-cli;"},`+
		`{"type":"text","text":"SECRET identity","cache_control":{"type":"ephemeral"}},{"type":"text","text":"SECRET prompt %s","cache_control":{"type":"ephemeral","ttl":"1h"}}],`+
		`"messages":[{"role":"user","content":"SECRET question %d"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"SECRET_TOOL","input":{"path":"SECRET"}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"SECRET result"},{"type":"text","text":"SECRET go on","cache_control":{"type":"ephemeral"}}]}],`+
		`"metadata":{"user_id":"SECRET user"}}`, strings.Repeat("long ", 400), turn)
}

func exchange(turn int) *Exchange {
	e := &Exchange{Arrival: time.Now(), Body: body(turn), Tenant: "SECRET tenant", Key: "0123456789abcdef", Model: "claude-sonnet-4-5",
		Stream: true, MaxTokens: 128000, Status: 200, Usage: &Usage{Input: 10, Output: 20, CacheWrite: 30, CacheRead: 40}}
	e.SetLimits(map[string][]string{"Anthropic-Ratelimit-Input-Tokens-Limit": {"400000"}, "Anthropic-Ratelimit-Requests-Limit": {"4000"}})
	return e
}

// value is a counter's value.
func value(c prometheus.Counter) float64 {
	var m dto.Metric
	c.Write(&m)
	return m.GetCounter().GetValue()
}

func open(t *testing.T, cfg Config) *Recorder {
	t.Helper()
	r, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A line holds the request's shape, block by block, and no text.
func TestRecordsShapeNotText(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	r := open(t, Config{Path: path, MaxBytes: 1 << 20})
	r.Add(exchange(1))
	r.Add(exchange(2))
	r.Close()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bytes.ToLower(raw), []byte("secret")) {
		t.Fatalf("the recording holds text of the request:\n%s", raw)
	}
	rec, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Requests) != 2 {
		t.Fatalf("%d requests; want 2", len(rec.Requests))
	}
	a, b := rec.Requests[0], rec.Requests[1]
	if a.Model != "claude-sonnet-4-5" || !a.Stream || a.MaxTokens != 128000 || a.Status != 200 || a.Tenant == "" || a.Key == "" || a.Key == "0123456789abcdef" {
		t.Errorf("request fields: %+v", a)
	}
	if a.Limits == nil || a.Limits.InputTokens != 400000 || a.Limits.Requests != 4000 || a.Usage == nil || a.Usage.CacheRead != 40 {
		t.Errorf("limits %+v, usage %+v", a.Limits, a.Usage)
	}
	want := []struct{ in, role, typ, ttl string }{
		{"tools", "", "", ""}, {"system", "", "attribution", ""}, {"system", "", "text", "5m?"}, {"system", "", "text", "1h"},
		{"messages", "user", "text", ""}, {"messages", "assistant", "tool_use", ""}, {"messages", "user", "tool_result", ""}, {"messages", "user", "text", "5m?"},
	}
	if len(a.Blocks) != len(want) {
		t.Fatalf("%d blocks; want %d: %+v", len(a.Blocks), len(want), a.Blocks)
	}
	for i, w := range want {
		g := a.Blocks[i]
		if g.In != w.in || g.Role != w.role || g.Type != w.typ || (w.ttl != "") != (g.Cache != nil) || w.ttl == "1h" && g.Cache.TTL != "1h" {
			t.Errorf("block %d: %+v; want %+v", i, g, w)
		}
		if g.Tokens < 1 || len(g.Hash) != 2*hashLen {
			t.Errorf("block %d: tokens %d, hash %q", i, g.Tokens, g.Hash)
		}
		// Only the first message differs between the two requests.
		if same := a.Blocks[i].Hash == b.Blocks[i].Hash; same != (i != 4) {
			t.Errorf("block %d: hashes alike %v between the two turns", i, same)
		}
	}
	if a.Blocks[3].Tokens < 500 {
		t.Errorf("the long system block is %d tokens; want ~500", a.Blocks[3].Tokens)
	}
}

// The recording rotates within its bound, and both parts read back as one
// recording, hashed with one salt.
func TestRotatesWithinTheBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	const bound = 16 << 10
	r := open(t, Config{Path: path, MaxBytes: bound})
	for i := range 40 {
		r.Add(exchange(i))
		for len(r.ch) > 0 {
			time.Sleep(time.Millisecond) // in turn: none dropped for a full queue
		}
	}
	r.Close()
	cur, err1 := os.Stat(path)
	old, err2 := os.Stat(path + ".1")
	if err1 != nil || err2 != nil {
		t.Fatalf("want %s and its .1: %v, %v", path, err1, err2)
	}
	if total := cur.Size() + old.Size(); total > bound {
		t.Errorf("the recording takes %d bytes; the bound is %d", total, bound)
	}
	rec, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Header.Part < 3 {
		t.Errorf("part %d after 40 requests of ~1.5 KB in 16 KB; want several rotations", rec.Header.Part)
	}
	older, _ := readFile(path + ".1")
	if older.Header.ID != rec.Header.ID || older.Header.Salt != rec.Header.Salt || older.Header.Part != rec.Header.Part-1 {
		t.Errorf("the parts' headers: %+v and %+v", older.Header, rec.Header)
	}
	n := len(rec.Requests)
	if n < 4 || n >= 40 {
		t.Fatalf("%d requests read back; want the last few", n)
	}
	first, last := rec.Requests[0], rec.Requests[n-1]
	if first.Blocks[1].Hash != last.Blocks[1].Hash {
		t.Error("equal blocks hash differently across a rotation")
	}
	if got := value(r.written); got != 40 {
		t.Errorf("written %v; want 40", got)
	}
}

// A full queue drops and counts, and Add returns at once.
func TestAddNeverWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	r := open(t, Config{Path: path, MaxBytes: 1 << 20, Queue: 2})
	writing, release := make(chan struct{}), make(chan struct{})
	first := true
	r.before = func() {
		if first { // the writer is stuck on its first exchange
			first = false
			writing <- struct{}{}
			<-release
		}
	}
	r.Add(exchange(0))
	<-writing
	start := time.Now()
	for i := range 10 {
		r.Add(exchange(i + 1))
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("10 Adds took %v with the writer stuck", d)
	}
	if got := value(r.dropped.WithLabelValues("full")); got != 8 {
		t.Errorf("dropped %v; want 8 (a queue of 2 behind the one being written)", got)
	}
	close(release)
	r.Close()
	if got := value(r.written); got != 3 {
		t.Errorf("written %v; want 3", got)
	}
}

// Past QueueBytes of bodies waiting, exchanges are dropped too.
func TestQueueBytesBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	e := exchange(0)
	r := open(t, Config{Path: path, MaxBytes: 1 << 20, QueueBytes: int64(2*len(e.Body) + 1)})
	release := make(chan struct{})
	r.before = func() { <-release }
	for range 5 {
		r.Add(exchange(0))
	}
	close(release)
	r.Close()
	if got := value(r.dropped.WithLabelValues("full")); got != 3 {
		t.Errorf("dropped %v; want 3 past two bodies' bytes", got)
	}
}

// A restarted sluice goes on with the recording in its file; a file that
// is not a recording is refused, untouched.
func TestContinuesRecording(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.jsonl")
	for range 2 {
		r := open(t, Config{Path: path, MaxBytes: 1 << 20})
		r.Add(exchange(0))
		r.Close()
	}
	rec, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Requests) != 2 || rec.Requests[0].Blocks[4].Hash != rec.Requests[1].Blocks[4].Hash {
		t.Errorf("two runs on one file: %d requests, or equal blocks hashed differently", len(rec.Requests))
	}
	other := filepath.Join(dir, "notes.txt")
	os.WriteFile(other, []byte("my notes\n"), 0o600)
	if _, err := Open(Config{Path: other, MaxBytes: 1 << 20}); err == nil || !strings.Contains(err.Error(), "not a sluice recording") {
		t.Errorf("a file of another kind: %v", err)
	}
	if b, _ := os.ReadFile(other); string(b) != "my notes\n" {
		t.Errorf("the other file was changed: %q", b)
	}
}

// Two recordings hash the same request apart.
func TestRecordingsAreNotLinkable(t *testing.T) {
	var hashes []string
	for range 2 {
		path := filepath.Join(t.TempDir(), "rec.jsonl")
		r := open(t, Config{Path: path, MaxBytes: 1 << 20})
		r.Add(exchange(0))
		r.Close()
		rec, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, rec.Requests[0].Blocks[2].Hash+rec.Requests[0].Tenant)
	}
	if hashes[0] == hashes[1] {
		t.Error("two recordings hash the same block and tenant alike")
	}
}

func BenchmarkShape(b *testing.B) {
	e := exchange(0)
	h := newHasher([]byte("0123456789abcdef"))
	b.SetBytes(int64(len(e.Body)))
	b.ReportAllocs()
	for b.Loop() {
		shape(e, h)
	}
}

// An exchange that ends after Close (a client still being answered) is
// dropped, not a panic.
func TestAddAfterClose(t *testing.T) {
	r := open(t, Config{Path: filepath.Join(t.TempDir(), "rec.jsonl"), MaxBytes: 1 << 20})
	r.Close()
	r.Add(exchange(0))
	r.Close()
}

// A body of millions of tiny blocks (a hostile client's, or one the
// upstream refuses: it is recorded all the same) must not make the writer
// hold a Block for each and the line's JSON before finding the line too
// large: that took gigabytes for one 32 MB body. The writer stops at
// maxLineBlocks and drops the exchange.
func TestManyBlocksBoundedMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	const n = 1 << 20
	body := []byte(`{"model":"m","messages":[{"role":"user","content":[` + strings.Repeat("1,", n) + `1]}]}`)
	r := open(t, Config{Path: path, MaxBytes: 256 << 20})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	r.Add(&Exchange{Arrival: time.Now(), Body: body, Model: "m", Status: 400})
	r.Close()
	runtime.ReadMemStats(&after)
	if got := value(r.dropped.WithLabelValues("too_large")); got != 1 {
		t.Errorf("dropped as too large: %v; want 1", got)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Errorf("the writer allocated %d MB for a %d MB body of %d blocks; want at most 64 MB", alloc>>20, len(body)>>20, n+1)
	}
	t.Logf("%v", time.Since(start))
}

// docs/replay.md says the file is mode 0600; its header holds the salt,
// with which anyone who reads it can test a guess of a block's text (a
// known system prompt) or a tenant's name against the hashes. A file that
// was there empty (made by touch, 0644 under the usual umask) took the
// recording as it was.
func TestNewRecordingIsMode0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rec.jsonl")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	r := open(t, Config{Path: path, MaxBytes: 1 << 20})
	r.Add(exchange(0))
	r.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Errorf("a recording begun in an empty file of mode %v has mode %v; want 0600", os.FileMode(0o644), m)
	}
}

// A dangling symlink at RECORD_FILE is refused, not followed: following it
// would create the recording wherever the link points (another user's
// directory, a path an attacker chose). A link to a file that exists (as
// a regular file is) is still taken.
func TestDanglingSymlinkRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere", "made-by-sluice.jsonl")
	if err := os.Mkdir(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "rec.jsonl")
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("no symlinks here: %v", err)
	}
	r, err := Open(Config{Path: link, MaxBytes: 1 << 20})
	if err == nil {
		r.Close()
		t.Fatal("a dangling symlink at RECORD_FILE was followed")
	}
	if !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("error %q; want it to say the path is a symbolic link to nothing", err)
	}
	if _, err := os.Lstat(target); err == nil {
		t.Error("the link's target was created")
	}
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = open(t, Config{Path: link, MaxBytes: 1 << 20})
	r.Add(exchange(0))
	r.Close()
	if st, err := os.Stat(target); err != nil || st.Size() == 0 {
		t.Errorf("a link to an existing file: %v, %v; want the recording written there", st, err)
	}
}
