package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/apierror"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// heldKey is the upstream key the tests' sluice holds; the sluice keys are
// sluiceKey(name).
const heldKey = "sk-ant-held-0123456789-SECRET"

func sluiceKey(name string) string { return "sk-sluice-" + name + "-key" }

// keyEntry is a keys file entry for sluiceKey(name), with extra members.
func keyEntry(name string, extra string) string {
	sum := sha256.Sum256([]byte(sluiceKey(name)))
	e := fmt.Sprintf(`{"name":%q,"sha256":%q`, name, hex.EncodeToString(sum[:]))
	if extra != "" {
		e += "," + extra
	}
	return e + "}"
}

// writeKeys writes a keys file of entries to path.
func writeKeys(t *testing.T, path string, entries ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(`{"keys":[`+strings.Join(entries, ",")+"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startSim serves a simulator with no latency on loopback.
func startSim(t *testing.T) *sim.Server {
	t.Helper()
	c := sim.DefaultConfig()
	c.TTFT, c.PerToken = 0, 0
	s := sim.New(c)
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	simURLs.Store(s, srv.URL)
	return s
}

var simURLs sync.Map // *sim.Server → its URL

func simURL(s *sim.Server) string { u, _ := simURLs.Load(s); return u.(string) }

// sendRaw makes a request with the given credential header ("x-api-key"
// or "bearer"; "" for none); the caller closes the answer's body.
func sendRaw(t *testing.T, method, url, body, how, cred string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	switch how {
	case "x-api-key":
		req.Header.Set("X-Api-Key", cred)
	case "bearer":
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// send is sendRaw, for the status and body of the answer.
func send(t *testing.T, method, url, body, how, cred string) (int, string) {
	t.Helper()
	resp := sendRaw(t, method, url, body, how, cred)
	defer resp.Body.Close()
	return resp.StatusCode, readAll(t, resp.Body)
}

// errorType is the error.type of an Anthropic-shaped error body.
func errorType(t *testing.T, body string) string {
	t.Helper()
	var e apierror.Body
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" {
		t.Fatalf("not an Anthropic-shaped error: %s", body)
	}
	return e.Error.Type
}

// descriptors records the descriptor of every windowed request admitted.
type descriptors struct {
	mu   sync.Mutex
	seen []request.Descriptor
}

func (d *descriptors) Admit(r *request.Descriptor, _ dispatch.Load) error {
	if r != nil {
		d.mu.Lock()
		d.seen = append(d.seen, *r)
		d.mu.Unlock()
	}
	return nil
}
func (d *descriptors) HoldUntil(*request.Descriptor) time.Time      { return time.Time{} }
func (d *descriptors) Settle(*request.Descriptor, int, http.Header) {}
func (d *descriptors) last() request.Descriptor {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[len(d.seen)-1]
}

type inboundFixture struct {
	sim   *sim.Server
	in    *Inbound
	keys  string // the keys file
	url   string
	descs *descriptors
	logs  *bytes.Buffer
	p     *Proxy
}

func startInbound(t *testing.T, windowed bool, entries ...string) *inboundFixture {
	t.Helper()
	f := &inboundFixture{sim: startSim(t), keys: filepath.Join(t.TempDir(), "keys.json"), descs: &descriptors{}, logs: &bytes.Buffer{}}
	writeKeys(t, f.keys, entries...)
	in, err := LoadInbound(InboundOptions{KeysFile: f.keys, UpstreamKey: heldKey})
	if err != nil {
		t.Fatal(err)
	}
	f.in = in
	cfg := testConfig(t, simURL(f.sim), windowed)
	var srv *testServer
	f.p, srv = startProxyWith(t, cfg, Options{Inbound: in, Parts: assemble.Parts{Admission: f.descs},
		Logger: slog.New(slog.NewJSONHandler(lockedWriter{w: f.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	f.url = srv.URL
	return f
}

// lockedWriter serialises writes to w.
type lockedWriter struct{ w *bytes.Buffer }

var logMu sync.Mutex

func (l lockedWriter) Write(b []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	return l.w.Write(b)
}

func TestInboundKeysRefuseMissingAndWrongKeysWith401(t *testing.T) {
	f := startInbound(t, false, keyEntry("alice", ""))
	for _, tc := range []struct{ name, how, cred string }{
		{"no key", "", ""},
		{"a wrong key", "x-api-key", sluiceKey("mallory")},
		{"an Anthropic key", "x-api-key", "sk-ant-api03-somebodys"},
		{"a wrong bearer", "bearer", sluiceKey("mallory")},
		{"the held key itself", "x-api-key", heldKey},
	} {
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens", "/v1/models", "/v1/messages/batches", "/v1/anything"} {
			method := http.MethodPost
			if path == "/v1/models" || path == "/v1/anything" {
				method = http.MethodGet
			}
			status, body := send(t, method, f.url+path, requestJSON, tc.how, tc.cred)
			if status != http.StatusUnauthorized || errorType(t, body) != "authentication_error" || !strings.Contains(body, "sluice key") {
				t.Errorf("%s, %s %s: %d %s; want 401 authentication_error saying to send a sluice key", tc.name, method, path, status, body)
			}
		}
	}
	if n := f.sim.Stats().Requests; n != 0 {
		t.Errorf("%d requests reached the upstream; want none", n)
	}
}

func TestInboundKeyReachesTheUpstreamAsTheHeldKeyOnly(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		f := startInbound(t, windowed, keyEntry("alice", `"tenant":"team-a","weight":2,"class":"batch","max_concurrent":3,"max_waiting":7`))
		batch := `{"requests":[{"custom_id":"a","params":` + requestJSON + `}]}`
		for _, tc := range []struct{ method, path, body, how string }{
			{"POST", "/v1/messages", requestJSON, "x-api-key"},
			{"POST", "/v1/messages", streamRequestJSON, "bearer"},
			{"POST", "/v1/messages/count_tokens", requestJSON, "x-api-key"},
			{"GET", "/v1/models", "", "bearer"},
			{"GET", "/v1/models/claude-sonnet-4-5", "", "x-api-key"},
			{"POST", "/v1/messages/batches", batch, "x-api-key"},
			{"GET", "/v1/messages/batches", "", "bearer"},
		} {
			if status, body := send(t, tc.method, f.url+tc.path, tc.body, tc.how, sluiceKey("alice")); status != http.StatusOK {
				t.Errorf("%s %s with a valid sluice key in %s: %d %s", tc.method, tc.path, tc.how, status, body)
			}
		}
		held := "x-api-key " + request.Tenant(http.Header{"X-Api-Key": {heldKey}})
		creds := f.sim.Stats().Credentials
		if len(creds) != 1 || creds[held] != 7 {
			t.Errorf("the upstream saw credentials %v; want only the held key (%s), 7 times", creds, held)
		}
		if !windowed {
			return
		}
		d := f.descs.last()
		sum := sha256.Sum256([]byte(sluiceKey("alice")))
		want := request.Inbound{Name: "alice", Tenant: "team-a", Weight: 2, Class: request.ClassBatch, MaxConcurrent: 3, MaxWaiting: 7,
			Hash: hex.EncodeToString(sum[:8])} // the key as spend and budgets name it

		if d.Inbound == nil || fmt.Sprint(*d.Inbound) != fmt.Sprint(want) {
			t.Errorf("descriptor's Inbound = %+v; want %+v", d.Inbound, want)
		}
		if wantKey := request.Tenant(http.Header{"X-Api-Key": {heldKey}}); d.Key != wantKey {
			t.Errorf("descriptor's Key = %q; want the held key's short hash %q", d.Key, wantKey)
		}
	})
}

func TestInboundKeyModelsAreEnforcedOnEveryPathThatNamesOne(t *testing.T) {
	f := startInbound(t, true, keyEntry("haiku-only", `"models":["claude-haiku-*","claude-opus-4-5"]`))
	sonnet := requestJSON // claude-sonnet-4-5
	haiku := strings.Replace(requestJSON, "claude-sonnet-4-5", "claude-haiku-4-5", 1)
	batchOf := func(ms ...string) string {
		var rs []string
		for i, m := range ms {
			rs = append(rs, fmt.Sprintf(`{"custom_id":"r%d","params":%s}`, i, m))
		}
		return `{"requests":[` + strings.Join(rs, ",") + `]}`
	}
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/v1/messages", sonnet, 403},
		{"POST", "/v1/messages", haiku, 200},
		{"POST", "/v1/messages/count_tokens", sonnet, 403},
		{"POST", "/v1/messages/count_tokens", haiku, 200},
		{"POST", "/v1/messages/batches", batchOf(haiku, sonnet), 403},
		{"POST", "/v1/messages/batches", batchOf(haiku, haiku), 200},
		{"GET", "/v1/models/claude-sonnet-4-5", "", 403},
		{"GET", "/v1/models/claude-opus-4-5", "", 200},
		{"GET", "/v1/models", "", 200},
		{"POST", "/v1/complete", sonnet, 403}, // sluice cannot tell its model: refused
	} {
		status, body := send(t, tc.method, f.url+tc.path, tc.body, "x-api-key", sluiceKey("haiku-only"))
		if status != tc.want {
			t.Errorf("%s %s: %d %s; want %d", tc.method, tc.path, status, body, tc.want)
			continue
		}
		if tc.want == 403 && (errorType(t, body) != "permission_error" || !strings.Contains(body, "haiku-only")) {
			t.Errorf("%s %s: %s; want a permission_error naming the key", tc.method, tc.path, body)
		}
	}
	if f.p.bodies.Held() != 0 {
		t.Errorf("%d bytes of body budget still held after every request ended", f.p.bodies.Held())
	}
}

func TestInboundKeysReloadRevokesAndKeepsTheOldSetOnABadFile(t *testing.T) {
	f := startInbound(t, true, keyEntry("alice", ""), keyEntry("bob", ""))
	call := func(name string) int {
		status, _ := send(t, "POST", f.url+"/v1/messages", requestJSON, "x-api-key", sluiceKey(name))
		return status
	}
	if call("alice") != 200 || call("bob") != 200 {
		t.Fatal("valid keys refused before any reload")
	}
	writeKeys(t, f.keys, keyEntry("bob", ""))
	if err := f.in.Reload(); err != nil {
		t.Fatal(err)
	}
	if s := call("alice"); s != 401 {
		t.Errorf("a revoked key after reload: %d; want 401", s)
	}
	if s := call("bob"); s != 200 {
		t.Errorf("a kept key after reload: %d; want 200", s)
	}
	for _, bad := range []string{
		`{"keys":[`, // cut short
		`{"keys":[{"name":"carol","key":"sk-sluice-carol"}]}`, // a key in the clear
		`{"keys":[{"name":"carol","sha256":"abc"}]}`,          // not a SHA-256
		`{"keys":[` + keyEntry("bob", "") + "," + keyEntry("bob", "") + `]}`,
	} {
		os.WriteFile(f.keys, []byte(bad), 0o600)
		err := f.in.Reload()
		if err == nil {
			t.Errorf("Reload of %s succeeded; want an error", bad)
		} else if strings.Contains(err.Error(), "sk-sluice") {
			t.Errorf("the reload error shows a key: %v", err)
		}
		if s := call("bob"); s != 200 {
			t.Errorf("after a failed reload (%s), a key of the old set: %d; want 200", bad, s)
		}
	}
}

// Reloads under traffic drop nothing: every request sees the old set or
// the new, each of which holds its key.
func TestInboundKeysReloadUnderTrafficDropsNothing(t *testing.T) {
	f := startInbound(t, true, keyEntry("alice", ""))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			writeKeys(t, f.keys, keyEntry("alice", fmt.Sprintf(`"weight":%d`, i%5+1)), keyEntry(fmt.Sprint("k", i), ""))
			if err := f.in.Reload(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var bad sync.Map
	var clients sync.WaitGroup
	for c := range 8 {
		clients.Go(func() {
			for range 25 {
				if status, body := send(t, "POST", f.url+"/v1/messages", requestJSON, "x-api-key", sluiceKey("alice")); status != 200 {
					bad.Store(c, fmt.Sprint(status, body))
				}
			}
		})
	}
	clients.Wait()
	close(stop)
	wg.Wait()
	bad.Range(func(k, v any) bool { t.Errorf("a request during reloads: %v", v); return true })
}

func TestLoadInboundRefusesWhatWouldNotWork(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	writeKeys(t, keys, keyEntry("alice", ""))
	keyFile := filepath.Join(dir, "upstream-key")
	os.WriteFile(keyFile, []byte(heldKey+"\n"), 0o600)
	twoLines := filepath.Join(dir, "two-lines")
	os.WriteFile(twoLines, []byte("sk-ant-a\nsk-ant-b\n"), 0o600)
	for _, tc := range []struct {
		o    InboundOptions
		want string
	}{
		{InboundOptions{KeysFile: keys}, "ANTHROPIC_API_KEY"},
		{InboundOptions{KeysFile: keys, UpstreamKeyFile: filepath.Join(dir, "missing")}, "UPSTREAM_KEY_FILE"},
		{InboundOptions{KeysFile: keys, UpstreamKeyFile: twoLines}, "one line"},
		{InboundOptions{KeysFile: filepath.Join(dir, "missing"), UpstreamKey: heldKey}, "INBOUND_KEYS_FILE"},
		{InboundOptions{KeysFile: keys, UpstreamKeyFile: keyFile}, ""},
	} {
		in, err := LoadInbound(tc.o)
		if tc.want == "" {
			if err != nil || in.set.Load().upstream != heldKey {
				t.Errorf("LoadInbound(%+v) = %v; want the key from the file, trimmed", tc.o, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadInbound(%+v) = %v; want an error naming %s", tc.o, err, tc.want)
		} else if strings.Contains(err.Error(), "sk-ant") {
			t.Errorf("the error shows a key: %v", err)
		}
	}
}

// The held key is in no log line, no metric and no answer; nor is a
// client's sluice key.
func TestInboundKeysLeakNowhere(t *testing.T) {
	f := startInbound(t, true, keyEntry("alice", ""))
	var seen strings.Builder
	var logged []string // the sluice ids of the requests that have an access line
	for _, c := range []struct{ method, path, body, how, cred string }{
		{"POST", "/v1/messages", requestJSON, "x-api-key", sluiceKey("alice")},
		{"POST", "/v1/messages", streamRequestJSON, "bearer", sluiceKey("alice")},
		{"POST", "/v1/messages", requestJSON, "x-api-key", sluiceKey("mallory")},
		{"POST", "/v1/messages", "{", "x-api-key", sluiceKey("alice")},
		{"GET", "/v1/models", "", "x-api-key", sluiceKey("alice")},
		{"GET", "/", "", "", ""},
		{"GET", "/metrics", "", "", ""},
		{"GET", "/healthz", "", "", ""},
	} {
		resp := sendRaw(t, c.method, f.url+c.path, c.body, c.how, c.cred)
		fmt.Fprintf(&seen, "%d %v %s\n", resp.StatusCode, resp.Header, readAll(t, resp.Body))
		resp.Body.Close()
		if c.path != "/metrics" && c.path != "/healthz" { // neither has an access line
			logged = append(logged, resp.Header.Get(sluiceIDHeader))
		}
	}
	// Every access line, each written just after its answer went out.
	fmt.Fprintf(&seen, "%s", waitLogged(t, func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return f.logs.String()
	}, logged...))
	if !strings.Contains(seen.String(), `"msg":"request"`) || !strings.Contains(seen.String(), "sluice_requests_total") {
		t.Fatal("the test saw no access line or no metrics: it would prove nothing")
	}
	for _, secret := range []string{heldKey, "SECRET", sluiceKey("alice"), sluiceKey("mallory")} {
		if strings.Contains(seen.String(), secret) {
			t.Errorf("%q appears in an answer, a log line or a metric", secret)
		}
	}
}
