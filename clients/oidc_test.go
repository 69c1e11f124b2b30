package clients

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/oidctest"
	"github.com/sluicehq/sluice/oidcauth"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// apiKeyHelper is the script Claude Code runs for its credential: it
// asks the identity provider's token endpoint for a token (a
// client-credentials grant, as a machine identity would; a person's
// helper would print a token their sign-in left) and prints it. Each run
// is counted in $HELPER_RUNS.
const apiKeyHelper = `const form = new URLSearchParams({grant_type: "client_credentials", scope: "openid"});
const auth = "Basic " + Buffer.from(process.env.IDP_CLIENT_ID + ":" + process.env.IDP_CLIENT_SECRET).toString("base64");
const res = await fetch(process.env.IDP_ISSUER + "/oauth/token", {method: "POST", body: form, headers: {authorization: auth}});
if (!res.ok) { console.error("token endpoint: " + res.status); process.exit(1); }
const {access_token} = await res.json();
(await import("node:fs")).appendFileSync(process.env.HELPER_RUNS, "run\n");
process.stdout.write(access_token);
`

// Claude Code signs in through the organisation's identity provider: its
// apiKeyHelper fetches a token from a real provider, Claude Code sends it,
// and sluice (taking that provider's tokens only, holding the upstream
// key itself) serves it from the simulator.
func TestClaudeCodeWithAnAPIKeyHelperToken(t *testing.T) {
	requireClients(t)
	bin := claudeBinary(t)
	idp := oidctest.Start(t)
	id, secret := idp.ServiceAccount(oidctest.User{Subject: "u-dev", Email: "dev@example.com", Groups: []string{"eng"}})

	s := sim.New(sim.DefaultConfig())
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	tokens, err := oidcauth.New(oidcauth.Options{Issuer: idp.Issuer(), Audience: oidctest.ClientID,
		Groups: []oidcauth.Group{{Name: "eng"}}, Client: &http.Client{Transport: tr, Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	const held = "sk-ant-held-by-sluice"
	in, err := proxy.LoadInbound(proxy.InboundOptions{UpstreamKey: held, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Enabled, cfg.UIEnabled = true, false
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	cfg.OIDCIssuer, cfg.OIDCAudience = idp.Issuer(), oidctest.ClientID
	base := serveStackWith(t, cfg, assemble.Env{}, proxy.Options{Inbound: in})

	home := t.TempDir()
	helper, runs := filepath.Join(home, "idp-token.mjs"), filepath.Join(home, "helper-runs")
	settings := map[string]any{"apiKeyHelper": "node " + helper}
	b, _ := json.Marshal(settings)
	for path, data := range map[string][]byte{helper: []byte(apiKeyHelper), filepath.Join(home, ".claude", "settings.json"): b} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-p", "Say hello in five words.", "--output-format", "json")
	cmd.Dir = t.TempDir()
	// No ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN: the helper's token is
	// the only credential Claude Code has.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ANTHROPIC_") && !strings.HasPrefix(kv, "CLAUDE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+home, "ANTHROPIC_BASE_URL="+base, "DISABLE_TELEMETRY=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1", "IDP_ISSUER="+idp.Issuer(), "IDP_CLIENT_ID="+id, "IDP_CLIENT_SECRET="+secret, "HELPER_RUNS="+runs)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("claude -p: %v\nstdout: %.2000s\nstderr: %.2000s", err, out, stderr.String())
	}
	var res claudeResult
	if err := json.Unmarshal(out, &res); err != nil || res.Type != "result" || res.Subtype != "success" || res.IsError || res.Result == "" {
		t.Fatalf("claude's result = %+v (%v); want a success with text\n%.2000s", res, err, out)
	}
	if r, err := os.ReadFile(runs); err != nil || !strings.Contains(string(r), "run") {
		t.Errorf("the apiKeyHelper did not run: %v", err)
	}
	// Only sluice's held key reached the upstream: the token was taken by
	// sluice, which takes nothing else here.
	creds := s.Stats().Credentials
	if want := "x-api-key " + request.Tenant(http.Header{"X-Api-Key": {held}}); len(creds) != 1 || creds[want] == 0 {
		t.Errorf("the upstream saw %v; want only sluice's held key", creds)
	}
}
