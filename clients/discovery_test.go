package clients

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/cloud"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/cloudtest"
	"github.com/sluicehq/sluice/proxy"
)

// TestClaudeCodeModelDiscovery: real Claude Code with gateway model
// discovery on (CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1) against a
// sluice whose only backend is Bedrock, with a sluice key that may call
// only Sonnet 4.5 and Haiku 4.5: Claude Code asks sluice for GET
// /v1/models, sluice answers from the Bedrock backend's model table
// (Bedrock serves no list), and the models Claude Code keeps for its
// picker are exactly the key's, while its prompt still succeeds.
func TestClaudeCodeModelDiscovery(t *testing.T) {
	requireClients(t)
	bin := claudeBinary(t)
	s := cloudtest.Start(t, cloudtest.Config())
	cloudtest.DefaultChains(t)

	const key = "sk-sluice-discovery-test-key"
	sum := sha256.Sum256([]byte(key))
	keys := filepath.Join(t.TempDir(), "keys.json")
	entry := `{"keys":[{"name":"dev","sha256":"` + hex.EncodeToString(sum[:]) + `","models":["claude-sonnet-4-5*","claude-haiku-4-5*"]}]}`
	if err := os.WriteFile(keys, []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := proxy.LoadInbound(proxy.InboundOptions{KeysFile: keys, UpstreamKey: "sk-ant-held-unused"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Enabled = true
	cfg.UpstreamURL, _ = url.Parse("http://127.0.0.1:1") // unused: every call is routed
	cfg.Backends = []config.Backend{{Name: "aws", Kind: "bedrock", Region: "us-east-1", Endpoint: s.URL}}
	base := serveStackWith(t, cfg, assemble.Env{Cloud: cloud.New}, proxy.Options{Inbound: in})

	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, out, err := runClaudeHome(ctx, bin, base, home, "Say hello in five words.",
		"ANTHROPIC_API_KEY="+key, "CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1",
		"ANTHROPIC_MODEL=claude-sonnet-4-5", "ANTHROPIC_SMALL_FAST_MODEL=claude-haiku-4-5")
	if err != nil || res.Subtype != "success" || res.IsError {
		t.Fatalf("claude -p: %v %+v\n%.2000s", err, res, out)
	}
	data, err := os.ReadFile(filepath.Join(home, ".claude", "cache", "gateway-models.json"))
	if err != nil {
		t.Fatalf("Claude Code kept no discovered models: %v", err)
	}
	var cache struct {
		BaseURL string `json:"baseUrl"`
		Models  []struct {
			ID          string `json:"id"`
			DisplayName string `json:"display_name"`
		} `json:"models"`
	}
	if err := json.Unmarshal(data, &cache); err != nil {
		t.Fatalf("gateway-models.json: %v\n%s", err, data)
	}
	var ids []string
	for _, m := range cache.Models {
		ids = append(ids, m.ID)
		if m.DisplayName == "" {
			t.Errorf("model %s has no display name", m.ID)
		}
	}
	slices.Sort(ids)
	want := []string{"claude-haiku-4-5", "claude-haiku-4-5-20251001", "claude-sonnet-4-5", "claude-sonnet-4-5-20250929"}
	if cache.BaseURL != base || !slices.Equal(ids, want) {
		t.Errorf("Claude Code discovered %v from %s; want the key's models %v from %s", ids, cache.BaseURL, want, base)
	}
	for _, r := range s.Requests() {
		if strings.Contains(r.Path, "models") && !strings.HasPrefix(r.Path, "/model/") {
			t.Errorf("a model list reached Bedrock: %s %s", r.Method, r.Path)
		}
	}
}
