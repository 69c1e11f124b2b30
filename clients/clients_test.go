package clients

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/cloud"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/cloudtest"
	"github.com/sluicehq/sluice/internal/sluicebin"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// requireClients fails the test in CI when the npm clients are not
// installed, and skips it elsewhere with how to install them.
func requireClients(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("node_modules", "@anthropic-ai", "sdk", "package.json")); err == nil {
		if _, err := exec.LookPath("node"); err == nil {
			return
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("the real clients are not installed: .ci/run must run `npm ci --prefix clients` (and Node.js must be on PATH)")
	}
	t.Skip("the real clients are not installed; run `npm ci --prefix clients` to run these tests")
}

// claudeBinary is Claude Code's native binary, from the platform package
// npm installs beside the wrapper (the wrapper's postinstall, which would
// copy it into place, is not run by npm unless approved).
func claudeBinary(t *testing.T) string {
	t.Helper()
	arch := map[string]string{"amd64": "x64", "arm64": "arm64"}[runtime.GOARCH]
	bin, err := filepath.Abs(filepath.Join("node_modules", "@anthropic-ai", "claude-code-"+runtime.GOOS+"-"+arch, "claude"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Claude Code's native binary is not installed at %s: %v", bin, err)
		}
		t.Skipf("Claude Code's native binary is not installed at %s", bin)
	}
	return bin
}

// startServe runs, in this process, what `sluice serve` runs (proxy.Server,
// windowed) in front of a simulator, and returns its base URL.
func startServe(t *testing.T) string {
	t.Helper()
	scfg := sim.DefaultConfig()
	scfg.BatchDuration = 500 * time.Millisecond
	base, _ := startStack(t, scfg, true)
	return base
}

// startStack runs a simulator with scfg and, in front of it, sluice
// serve's stack with every setting at its default, windowed or plain; it
// returns sluice's base URL and the simulator.
func startStack(t *testing.T, scfg sim.Config, windowed bool) (string, *sim.Server) {
	t.Helper()
	s := sim.New(scfg)
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	cfg := config.Default()
	cfg.Enabled = windowed
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	return serveStack(t, cfg, assemble.Env{}), s
}

// serveStack serves sluice serve's stack for cfg, of the parts
// assemble builds with env, on a loopback listener, and returns its base
// URL.
func serveStack(t *testing.T, cfg config.Config, env assemble.Env) string {
	t.Helper()
	return serveStackWith(t, cfg, env, proxy.Options{})
}

// serveStackWith is serveStack with opt's inbound keys (and anything else
// it sets but the logger and the parts).
func serveStackWith(t *testing.T, cfg config.Config, env assemble.Env, opt proxy.Options) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	cfg.PublicURL, _ = url.Parse(base)
	env.Log = slog.New(slog.DiscardHandler)
	parts, err := assemble.Build(cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	opt.Logger, opt.Parts = env.Log, *parts
	p, err := proxy.New(cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	stop := (&proxy.Server{Proxy: p, Log: env.Log}).Start(ln)
	t.Cleanup(func() { stop() })
	return base
}

// startDemo builds sluice and runs `sluice demo` with no built-in traffic
// on a free port, and returns its base URL.
func startDemo(t *testing.T) string {
	t.Helper()
	bin := sluicebin.Path(t)
	cmd := exec.Command(bin, "demo", "--burst", "0")
	cmd.Env = append(os.Environ(), "LISTEN_ADDR=127.0.0.1:0", "UI_ENABLED=0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "sluice" {
				found <- f[1]
			}
		}
		close(found)
	}()
	select {
	case base, ok := <-found:
		if !ok {
			t.Fatal("sluice demo ended without printing its address")
		}
		return base
	case <-time.After(60 * time.Second):
		t.Fatal("sluice demo did not print its address within 60 s")
	}
	return ""
}

// TestTypeScriptSDKThroughSluice runs the official TypeScript SDK's
// message, stream, tool use, count_tokens, models, two requests on one
// cached prompt (the leader's answer reassembled from a stream, the
// follower reading its cache), and a batch whose results are fetched
// through the results_url sluice rewrote.
func TestTypeScriptSDKThroughSluice(t *testing.T) {
	requireClients(t)
	base := startServe(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "sdk-check.mjs")
	cmd.Env = append(os.Environ(), "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=sk-ts-sdk")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sdk-check.mjs: %v\n%s", err, out)
	}
	want := []string{"message", "stream", "tool_use", "count_tokens", "models", "cached_pair", "batch_ended", "batch_results"}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var c struct {
			Check string `json:"check"`
			OK    bool   `json:"ok"`
		}
		if json.Unmarshal([]byte(line), &c) == nil && c.OK {
			got = append(got, c.Check)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("checks passed: %v; want %v\n%s", got, want, out)
	}
}

// claudeSays runs one non-interactive Claude Code prompt against the
// sluice at base, with env on top of its own, and fails the test unless
// it comes back a success with text.
func claudeSays(t *testing.T, bin, base string, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-p", "Say hello in five words.", "--output-format", "json")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=sk-claude-code",
		"DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1")
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("claude -p: %v\nstdout: %.2000s\nstderr: %.2000s", err, out, stderr.String())
	}
	var res struct {
		Type    string `json:"type"`
		Subtype string `json:"subtype"`
		IsError bool   `json:"is_error"`
		Result  string `json:"result"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("claude's output is not its JSON result: %v\n%.2000s", err, out)
	}
	if res.Type != "result" || res.Subtype != "success" || res.IsError || res.Result == "" {
		t.Fatalf("claude's result = %+v; want a success with text\n%.2000s", res, out)
	}
}

// TestClaudeCodeThroughSluice runs one non-interactive Claude Code prompt
// against a quiet `sluice demo` and against sluice serve's stack in front
// of the simulator; each must come back a success.
func TestClaudeCodeThroughSluice(t *testing.T) {
	requireClients(t)
	bin := claudeBinary(t)
	for _, tc := range []struct {
		name  string
		start func(*testing.T) string
	}{{"demo", startDemo}, {"serve", startServe}} {
		t.Run(tc.name, func(t *testing.T) {
			claudeSays(t, bin, tc.start(t))
		})
	}
}

// startCloudStack runs sluice serve's stack, windowed, routed to one
// backend of kind (bedrock or vertex) on a simulator that speaks that
// cloud's protocol with test credentials, which the clouds' default
// chains find in the environment (a service account file for Vertex).
func startCloudStack(t *testing.T, kind string) (string, *cloudtest.Sim) {
	t.Helper()
	s := cloudtest.Start(t, cloudtest.Config())
	sa := cloudtest.DefaultChains(t)
	cfg := config.Default()
	cfg.Enabled = true
	cfg.UpstreamURL, _ = url.Parse("http://127.0.0.1:1") // unused: every call is routed
	cfg.Backends = []config.Backend{map[string]config.Backend{
		"bedrock": {Name: "aws", Kind: "bedrock", Region: "us-east-1", Endpoint: s.URL},
		"vertex":  {Name: "gcp", Kind: "vertex", Region: "us-east5", Project: "sim-project", Endpoint: s.URL, CredentialsFile: sa},
	}[kind]}
	return serveStack(t, cfg, assemble.Env{Cloud: cloud.New}), s
}

// TestClientsThroughSluiceToEachCloud: the official TypeScript SDK
// (message, stream, tool use, count_tokens, a cached pair) and Claude
// Code speak the Messages API to sluice routed to a simulated Bedrock
// and a simulated Vertex AI; the cloud saw only its own protocol.
func TestClientsThroughSluiceToEachCloud(t *testing.T) {
	requireClients(t)
	bin := claudeBinary(t)
	for _, kind := range []string{"bedrock", "vertex"} {
		t.Run(kind, func(t *testing.T) {
			base, s := startCloudStack(t, kind)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "node", "sdk-check.mjs")
			cmd.Env = append(os.Environ(), "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=sk-ts-sdk", "SLUICE_SKIP_CHECKS=models,batch")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("sdk-check.mjs: %v\n%s", err, out)
			}
			// Its default model (claude-opus-5-5 in the version installed)
			// is newer than the clouds' built-in tables: a team on a cloud
			// names the model its account enables, as here, or maps it
			// in the backend's models table (docs/clouds.md).
			claudeSays(t, bin, base, "ANTHROPIC_MODEL=claude-sonnet-4-5", "ANTHROPIC_SMALL_FAST_MODEL=claude-haiku-4-5")
			want := map[string]string{"bedrock": "/model/", "vertex": "/v1/projects/"}[kind]
			for _, r := range s.Requests() {
				if !strings.HasPrefix(r.Path, want) {
					t.Errorf("the cloud was called at %s; want only its own paths (%s...)", r.Path, want)
				}
			}
			if len(s.Requests()) < 6 {
				t.Errorf("%d calls reached the cloud; want the SDK's and Claude Code's", len(s.Requests()))
			}
		})
	}
}
