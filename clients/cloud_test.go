package clients

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/cloud"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/cloudtest"
)

// cloudSDKModel is the model each cloud package is asked for, in the
// cloud's own naming: a Bedrock inference profile id, a Vertex model name,
// a Foundry deployment name.
var cloudSDKModel = map[string]string{
	"bedrock": "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
	"vertex":  "claude-sonnet-4-5@20250929",
	"foundry": "claude-sonnet-4-5",
}

// cloudSDKChecks is what cloud-sdk-check.mjs checks for each package
// (AnthropicBedrock has no countTokens).
var cloudSDKChecks = map[string][]string{
	"bedrock": {"message", "stream"},
	"vertex":  {"message", "stream", "count_tokens"},
	"foundry": {"message", "stream", "count_tokens"},
}

// runCloudSDK runs cloud-sdk-check.mjs for cloud against base with env
// on top of the simulator's test credentials, and fails the test unless
// every check of that package passed.
func runCloudSDK(t *testing.T, cloud, base string, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "cloud-sdk-check.mjs")
	cmd.Env = append(os.Environ(), "SLUICE_CLOUD="+cloud, "SLUICE_CLOUD_BASE_URL="+base, "SLUICE_MODEL="+cloudSDKModel[cloud],
		"SLUICE_AWS_ACCESS_KEY_ID="+cloudtest.AccessKeyID, "SLUICE_AWS_SECRET_ACCESS_KEY="+cloudtest.SecretAccessKey,
		"SLUICE_VERTEX_TOKEN="+cloudtest.VertexToken, "SLUICE_FOUNDRY_API_KEY="+cloudtest.FoundryAPIKey)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
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
	if want := cloudSDKChecks[cloud]; err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("cloud-sdk-check.mjs (%s): %v; checks passed %v, want %v\n%s", cloud, err, got, want, out)
	}
}

// TestCloudSDKsAgainstSimulator: the official TypeScript SDK's Bedrock and
// Vertex packages, as published, against the simulator's cloud paths.
// Both sign or send what the 1.x SDKs send (a SigV4 signature over the
// headers the client chose, without content-length; anthropic_version
// "2026-10-21"), which the real services accept: before the simulator
// verified the headers the client named and took both API versions,
// Bedrock answered 403 InvalidSignatureException and Vertex 400.
func TestCloudSDKsAgainstSimulator(t *testing.T) {
	requireClients(t)
	for _, cloud := range []string{"bedrock", "vertex"} {
		t.Run(cloud, func(t *testing.T) {
			s := cloudtest.Start(t, cloudtest.Config())
			base := s.URL
			if cloud == "vertex" {
				base += "/v1"
			}
			runCloudSDK(t, cloud, base)
			for _, r := range s.Requests() {
				if cloud == "bedrock" && !strings.HasPrefix(r.Path, "/model/") || cloud == "vertex" && !strings.HasPrefix(r.Path, "/v1/projects/sim-project/") {
					t.Errorf("%s called %s; want only its cloud's paths", cloud, r.Path)
				}
				if v := gjsonString(r.Body, "anthropic_version"); r.Method == "POST" && v != "2026-10-21" {
					t.Errorf("%s sent anthropic_version %q; want the 1.x SDKs' 2026-10-21 (is the installed package the pinned one?)", cloud, v)
				}
			}
		})
	}
}

// gjsonString is body's top-level string member name, or "".
func gjsonString(body []byte, name string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	var s string
	_ = json.Unmarshal(m[name], &s)
	return s
}

// TestFoundryClients: the official TypeScript SDK's Foundry package (with
// the resource's key, and with an Entra ID token) and Claude Code
// (CLAUDE_CODE_USE_FOUNDRY=1, ANTHROPIC_FOUNDRY_BASE_URL,
// ANTHROPIC_FOUNDRY_API_KEY) against the simulator's Foundry paths
// directly, and through sluice routed to a foundry backend on it: the
// clients speak to sluice as to a Foundry resource, with a key of their
// own that never reaches Azure, and sluice calls the resource with the
// backend's key.
func TestFoundryClients(t *testing.T) {
	requireClients(t)
	bin := claudeBinary(t)
	models := []string{"ANTHROPIC_MODEL=claude-sonnet-4-5", "ANTHROPIC_SMALL_FAST_MODEL=claude-haiku-4-5"}
	t.Run("direct", func(t *testing.T) {
		s := cloudtest.Start(t, cloudtest.Config())
		runCloudSDK(t, "foundry", s.URL+"/anthropic/")
		runCloudSDK(t, "foundry", s.URL+"/anthropic/", "SLUICE_FOUNDRY_TOKEN="+cloudtest.FoundryToken)
		claudeSays(t, bin, "http://127.0.0.1:1", append(models, "CLAUDE_CODE_USE_FOUNDRY=1",
			"ANTHROPIC_FOUNDRY_BASE_URL="+s.URL+"/anthropic", "ANTHROPIC_FOUNDRY_API_KEY="+cloudtest.FoundryAPIKey)...)
		foundryOnly(t, s, 7) // the SDK's 3 calls twice, and at least one of Claude Code's
	})
	t.Run("through sluice", func(t *testing.T) {
		s := cloudtest.Start(t, cloudtest.Config())
		t.Setenv("SLUICE_TEST_FOUNDRY_KEY", cloudtest.FoundryAPIKey)
		cfg := config.Default()
		cfg.Enabled = true
		cfg.UpstreamURL, _ = url.Parse("http://127.0.0.1:1") // unused: every call is routed
		cfg.Backends = []config.Backend{{Name: "azure", Kind: "foundry", Endpoint: s.URL + "/anthropic", Keys: []string{"env:SLUICE_TEST_FOUNDRY_KEY"}}}
		base := serveStack(t, cfg, assemble.Env{Cloud: cloud.New})
		runCloudSDK(t, "foundry", base, "SLUICE_FOUNDRY_API_KEY=sk-foundry-sdk-client")
		claudeSays(t, bin, "http://127.0.0.1:1", append(models, "CLAUDE_CODE_USE_FOUNDRY=1",
			"ANTHROPIC_FOUNDRY_BASE_URL="+base, "ANTHROPIC_FOUNDRY_API_KEY=sk-claude-code-client")...)
		foundryOnly(t, s, 4)
		for _, r := range s.Requests() {
			if r.Header.Get("X-Api-Key") != cloudtest.FoundryAPIKey || r.Header.Get("Api-Key") != "" || r.Header.Get("Authorization") != "" {
				t.Errorf("Foundry got x-api-key %q api-key %q authorization %q; want the backend's key alone",
					r.Header.Get("X-Api-Key"), r.Header.Get("Api-Key"), r.Header.Get("Authorization"))
			}
		}
	})
}

// foundryOnly fails the test unless at least min calls reached s, all on
// its Foundry paths.
func foundryOnly(t *testing.T, s *cloudtest.Sim, min int) {
	t.Helper()
	for _, r := range s.Requests() {
		if !strings.HasPrefix(r.Path, "/anthropic/v1/messages") {
			t.Errorf("Foundry was called at %s; want only /anthropic/v1/messages...", r.Path)
		}
	}
	if n := len(s.Requests()); n < min {
		t.Errorf("%d calls reached Foundry; want at least %d", n, min)
	}
}
