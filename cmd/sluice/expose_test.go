package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testcert"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

const (
	e2eHeldKey = "sk-ant-e2e-held-key-SECRET"
	aliceKey   = "sk-sluice-alice-e2e"
	bobKey     = "sk-sluice-bob-e2e"
)

func keysFile(names map[string]string) string {
	var entries []string
	for name, key := range names {
		sum := sha256.Sum256([]byte(key))
		entries = append(entries, fmt.Sprintf(`{"name":%q,"sha256":%q}`, name, hex.EncodeToString(sum[:])))
	}
	return `{"keys":[` + strings.Join(entries, ",") + "]}\n"
}

// logFile stands in for sluice serve's stderr: the lines it logged.
type logFile struct{ path string }

func (l logFile) text(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(l.path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// addrOf waits for the JSON log line msg and returns its addr.
func (l logFile) addrOf(t *testing.T, msg string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, line := range strings.Split(l.text(t), "\n") {
			var v struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &v) == nil && v.Msg == msg {
				return v.Addr
			}
		}
	}
	t.Fatalf("no %q line in the log:\n%s", msg, l.text(t))
	return ""
}

// sluice serve, as deployed beyond loopback: inbound keys, TLS, the admin
// listener; keys and certificate reloaded on a real SIGHUP; and neither
// the held key nor a sluice key in any answer, page, metric or log line.
func TestServeBeyondLoopback(t *testing.T) {
	s := sim.New(sim.Config{Seed: 1})
	up := httptest.NewServer(s)
	defer func() { up.Close(); s.Close() }()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	os.WriteFile(keys, []byte(keysFile(map[string]string{"alice": aliceKey, "bob": bobKey})), 0o600)
	certPEM, keyPEM, pool, err := testcert.New(1)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	t.Setenv("ANTHROPIC_API_KEY", e2eHeldKey)

	logs := logFile{filepath.Join(dir, "stderr")}
	f, err := os.Create(logs.path)
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = f
	defer func() { os.Stderr = stderr; f.Close() }()
	served := make(chan error, 1)
	go func() {
		served <- runServe([]string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--upstream", up.URL,
			"--batch-enabled", "1", "--log-format", "json", "--inbound-keys-file", keys,
			"--tls-cert-file", certFile, "--tls-key-file", keyFile})
	}()
	admin := "http://" + logs.addrOf(t, "sluice admin listening")
	api := "https://" + logs.addrOf(t, "sluice listening")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()

	var seen strings.Builder // every answer, for the leak check
	call := func(method, base, path, key, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		if strings.HasSuffix(path, "/live") { // a stream: its first event will do
			br := bufio.NewReader(resp.Body)
			event, _ := br.ReadString('\n')
			data, _ := br.ReadString('\n')
			fmt.Fprintf(&seen, "%d %v %s%s\n", resp.StatusCode, resp.Header, event, data)
			return resp.StatusCode
		}
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(&seen, "%d %v %s\n", resp.StatusCode, resp.Header, b)
		return resp.StatusCode
	}
	msg := `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		key  string
		want int
	}{{"", 401}, {"sk-sluice-wrong", 401}, {e2eHeldKey, 401}, {aliceKey, 200}, {bobKey, 200}} {
		if got := call("POST", api, "/v1/messages", tc.key, msg); got != tc.want {
			t.Errorf("POST /v1/messages with key %.14q…: %d; want %d", tc.key, got, tc.want)
		}
	}
	held := "x-api-key " + request.Tenant(http.Header{"X-Api-Key": {e2eHeldKey}})
	if creds := s.Stats().Credentials; len(creds) != 1 || creds[held] != 2 {
		t.Errorf("the upstream saw %v; want the held key twice and nothing else", creds)
	}

	// Revoke alice; a real SIGHUP.
	os.WriteFile(keys, []byte(keysFile(map[string]string{"bob": bobKey})), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	for deadline := time.Now().Add(10 * time.Second); call("POST", api, "/v1/messages", aliceKey, msg) != 401; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a key revoked and SIGHUP sent: still served")
		}
	}
	if got := call("POST", api, "/v1/messages", bobKey, msg); got != 200 {
		t.Errorf("a kept key after SIGHUP: %d", got)
	}
	// A broken file: the keys in force stay.
	os.WriteFile(keys, []byte(`{"keys":[{"name":"carol","key":"sk-sluice-carol"}]}`), 0o600)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.text(t), "inbound keys not reloaded"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no log line for a keys file that does not load")
		}
	}
	if got := call("POST", api, "/v1/messages", bobKey, msg); got != 200 {
		t.Errorf("a kept key after a failed reload: %d", got)
	}

	// The admin split: the page and the metrics only on the admin listener.
	for _, path := range []string{"/metrics", "/ui/", "/ui/api/live"} {
		if got := call("GET", api, path, bobKey, ""); got != 404 {
			t.Errorf("API port, GET %s: %d; want 404", path, got)
		}
		if got := call("GET", admin, path, "", ""); got != 200 {
			t.Errorf("admin, GET %s: %d; want 200", path, got)
		}
	}
	call("GET", api, "/", "", "")

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	if err := <-served; err != nil {
		t.Fatalf("sluice serve: %v", err)
	}
	all := seen.String() + logs.text(t)
	if !strings.Contains(all, "sluice_requests_total") || !strings.Contains(all, `"msg":"request"`) || !strings.Contains(all, "event: live") {
		t.Fatal("the leak check saw no metrics, access lines or live event: it would prove nothing")
	}
	for _, secret := range []string{e2eHeldKey, "SECRET", aliceKey, bobKey, "sk-sluice-carol"} {
		if strings.Contains(all, secret) {
			t.Errorf("%q appears in an answer, the page, the metrics or the log", secret)
		}
	}
}

func TestBenchRunsFromThePageFollowTheirAddress(t *testing.T) {
	for _, tc := range []struct {
		runs          config.BenchRuns
		listen, admin string
		want          bool
	}{
		{config.BenchRunsAuto, "127.0.0.1:8080", "", true},
		{config.BenchRunsAuto, "0.0.0.0:8080", "", false},
		{config.BenchRunsAuto, "0.0.0.0:8080", "127.0.0.1:9000", true},
		{config.BenchRunsAuto, "127.0.0.1:8080", ":9000", false},
		{config.BenchRunsOn, "0.0.0.0:8080", "", true},
		{config.BenchRunsOff, "127.0.0.1:8080", "", false},
	} {
		cfg := config.Default()
		cfg.UIBenchRuns, cfg.ListenAddr, cfg.AdminListenAddr = tc.runs, tc.listen, tc.admin
		if got := benchRuns(cfg); got != tc.want {
			t.Errorf("UI_BENCH_RUNS=%s, LISTEN_ADDR=%s, ADMIN_LISTEN_ADDR=%q: runs %v; want %v", tc.runs, tc.listen, tc.admin, got, tc.want)
		}
	}
}

// The key sluice inbound-key prints is the one its entry admits.
func TestInboundKeyPrintsAKeyItsEntryAdmits(t *testing.T) {
	var b strings.Builder
	if err := inboundKey([]string{"alice"}, &b); err != nil {
		t.Fatal(err)
	}
	var key, entry string
	for _, line := range strings.Split(b.String(), "\n") {
		if k, ok := strings.CutPrefix(line, "key:   "); ok {
			key = k
		}
		if e, ok := strings.CutPrefix(line, "entry: "); ok {
			entry = e
		}
	}
	if !strings.HasPrefix(key, "sk-sluice-") || len(key) < 40 || strings.Contains(entry, key) {
		t.Fatalf("printed %q; want a long sk-sluice- key, and an entry without it", b.String())
	}
	keys := filepath.Join(t.TempDir(), "keys.json")
	os.WriteFile(keys, []byte(`{"keys":[`+entry+`]}`), 0o600)
	t.Setenv("ANTHROPIC_API_KEY", e2eHeldKey)
	ex, err := openExposure(config.Config{InboundKeysFile: keys, ListenAddr: "127.0.0.1:0"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("the printed entry does not load: %v", err)
	}
	hs, err := newHandler(context.Background(), withUpstream(t, config.Default(), keys), slog.New(slog.DiscardHandler), ex.inbound)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.flushSpans() // and the spend books' writer
	defer hs.proxy.Close()
	srv := httptest.NewServer(hs.api)
	defer srv.Close()
	for k, want := range map[string]int{key: 200, key + "x": 401} {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+k)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /v1/models with the printed key%s: %d; want %d", map[bool]string{true: "", false: " altered"}[want == 200], resp.StatusCode, want)
		}
	}
	if err := inboundKey(nil, io.Discard); err == nil {
		t.Error("inbound-key without a name succeeded")
	}
}

// withUpstream is cfg with inbound keys from keys, in front of a simulator.
func withUpstream(t *testing.T, cfg config.Config, keys string) config.Config {
	t.Helper()
	s := sim.New(sim.Config{Seed: 1})
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	cfg.InboundKeysFile, cfg.UIEnabled = keys, false
	return cfg
}

// A keys file with no key is refused beyond loopback at start-up (see
// config.ValidateInboundKeys), before anything listens.
func TestEmptyInboundKeysRefusedBeyondLoopback(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	os.WriteFile(keys, []byte(`{"keys":[]}`), 0o600)
	t.Setenv("ANTHROPIC_API_KEY", e2eHeldKey)
	for addr, ok := range map[string]bool{"127.0.0.1:0": true, "0.0.0.0:0": false} {
		ex, err := openExposure(config.Config{InboundKeysFile: keys, ListenAddr: addr}, slog.New(slog.DiscardHandler))
		if ok != (err == nil) || !ok && !strings.Contains(err.Error(), "INBOUND_KEYS_FILE") {
			t.Errorf("LISTEN_ADDR=%s with no inbound key: %v", addr, err)
		}
		if ex != nil {
			ex.close()
		}
	}
}
