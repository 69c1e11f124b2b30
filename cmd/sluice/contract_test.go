package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/cloudtest"
)

// contractSluice serves sluice on loopback in front of s, windowed or
// not: kind anthropic sends to s as UPSTREAM_URL (the client's key goes
// through), bedrock, vertex and foundry route to s as that cloud.
func contractSluice(t *testing.T, s *cloudtest.Sim, kind, serviceAccount string, windowed bool) string {
	t.Helper()
	cfg := config.Default()
	cfg.Enabled = windowed
	cfg.UpstreamURL, _ = url.Parse(s.URL)
	switch kind {
	case "bedrock":
		cfg.Backends = []config.Backend{{Name: "aws", Kind: "bedrock", Region: "us-east-1", Endpoint: s.URL}}
	case "vertex":
		cfg.Backends = []config.Backend{{Name: "gcp", Kind: "vertex", Region: "us-east5", Project: "sim-project", Endpoint: s.URL, CredentialsFile: serviceAccount}}
	case "foundry":
		t.Setenv("SLUICE_TEST_CONTRACT_FOUNDRY_KEY", cloudtest.FoundryAPIKey)
		cfg.Backends = []config.Backend{{Name: "azure", Kind: "foundry", Endpoint: s.URL + "/anthropic", Keys: []string{"env:SLUICE_TEST_CONTRACT_FOUNDRY_KEY"}}}
	}
	return serveParts(t, cfg, nil, nil)
}

// contractBody is a Claude Code-shaped request: a cached system prompt,
// a tool, metadata, a thinking budget.
const contractBody = `{"model":"claude-sonnet-4-5","max_tokens":64,"stream":%s,` +
	`"system":[{"type":"text","text":"You are a careful assistant.","cache_control":{"type":"ephemeral"}}],` +
	`"tools":[{"name":"Read","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}],` +
	`"metadata":{"user_id":"user_contract"},"messages":[{"role":"user","content":"Say hello."}]}`

const contractBetas = "claude-code-20250219,interleaved-thinking-2025-05-14"

// TestGatewayContract holds sluice to Claude Code's gateway protocol
// reference, row by row, on both paths and every backend kind (the API,
// Bedrock, Vertex, Foundry; the
// table is in docs/claude-code.md, "The gateway contract"):
//
//   - POST /v1/messages?beta=true, matched by path: the anthropic-beta
//     and anthropic-version headers and the body reach a first-party
//     upstream unchanged, byte for byte; a cloud gets them as its own
//     protocol carries them (Bedrock: anthropic_beta in the body;
//     Vertex: the anthropic-beta header; Foundry, which speaks the
//     Messages API: unchanged), the rest of the body as sent;
//   - a stream arrives as server-sent events ending in message_stop;
//   - POST /v1/messages/count_tokens answers a count;
//   - an upstream's error reaches the client unmodified (first party);
//   - the HEAD / connection probe is answered;
//   - GET /v1/models answers a list in the API's shape (model discovery).
func TestGatewayContract(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	sa := cloudtest.DefaultChains(t)
	for _, kind := range []string{"anthropic", "bedrock", "vertex", "foundry"} {
		for _, windowed := range []bool{false, true} {
			t.Run(kind+map[bool]string{false: "/plain", true: "/windowed"}[windowed], func(t *testing.T) {
				base := contractSluice(t, s, kind, sa, windowed)
				send := func(method, path, body string, hdr ...string) *http.Response {
					t.Helper()
					var rd io.Reader
					if body != "" {
						rd = strings.NewReader(body)
					}
					req, _ := http.NewRequest(method, base+path, rd)
					req.Header.Set("X-Api-Key", "sk-ant-client-key")
					req.Header.Set("Anthropic-Version", "2023-06-01")
					req.Header.Set("Anthropic-Beta", contractBetas)
					req.Header.Set("Content-Type", "application/json")
					for i := 0; i+1 < len(hdr); i += 2 {
						req.Header.Set(hdr[i], hdr[i+1])
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					return resp
				}

				body := strings.Replace(contractBody, "%s", "false", 1)
				before := len(s.Requests())
				resp := send("POST", "/v1/messages?beta=true", body)
				if got := cloudtest.Body(t, resp); resp.StatusCode != 200 || !strings.Contains(got, `"type":"message"`) {
					t.Fatalf("POST /v1/messages?beta=true: %d %s", resp.StatusCode, got)
				}
				reached := s.Requests()[before:]
				if len(reached) != 1 {
					t.Fatalf("%d calls reached the upstream; want 1", len(reached))
				}
				checkForwarded(t, kind, reached[0], body)

				resp = send("POST", "/v1/messages?beta=true", strings.Replace(contractBody, "%s", "true", 1))
				if got := cloudtest.Body(t, resp); resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") ||
					!strings.Contains(got, "event: message_start") || !strings.HasSuffix(strings.TrimSpace(got), `data: {"type":"message_stop"}`) {
					t.Errorf("stream: %d %q %.300s", resp.StatusCode, resp.Header.Get("Content-Type"), got)
				}

				resp = send("POST", "/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"Say hello."}]}`)
				var count struct {
					InputTokens int `json:"input_tokens"`
				}
				if got := cloudtest.Body(t, resp); resp.StatusCode != 200 || json.Unmarshal([]byte(got), &count) != nil || count.InputTokens <= 0 {
					t.Errorf("count_tokens: %d %s", resp.StatusCode, got)
				}

				if kind == "anthropic" {
					// The simulator's own 403, as the upstream sends it,
					// against what sluice relays of the same.
					direct, _ := http.NewRequest("POST", s.URL+"/v1/messages", strings.NewReader(body))
					direct.Header.Set("X-Api-Key", "sk-ant-client-key")
					direct.Header.Set("Anthropic-Version", "2023-06-01")
					direct.Header.Set("X-Sim-Fault", "403")
					dresp, err := http.DefaultClient.Do(direct)
					if err != nil {
						t.Fatal(err)
					}
					want := cloudtest.Body(t, dresp)
					resp = send("POST", "/v1/messages", body, "X-Sim-Fault", "403")
					if got := cloudtest.Body(t, resp); resp.StatusCode != dresp.StatusCode || !sameError(got, want) {
						t.Errorf("upstream error through sluice: %d %s; want the upstream's %d %s unmodified", resp.StatusCode, got, dresp.StatusCode, want)
					}
				}

				resp = send("HEAD", "/", "")
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("HEAD / (Claude Code's connection probe): %d; want 200", resp.StatusCode)
				}

				resp = send("GET", "/v1/models?limit=1000", "")
				var list struct {
					Data []struct {
						Type, ID string
					}
					HasMore *bool `json:"has_more"`
				}
				got := cloudtest.Body(t, resp)
				if resp.StatusCode != 200 || json.Unmarshal([]byte(got), &list) != nil || len(list.Data) == 0 || list.HasMore == nil ||
					!slices.ContainsFunc(list.Data, func(m struct{ Type, ID string }) bool { return m.Type == "model" && m.ID == "claude-sonnet-4-5" }) {
					t.Errorf("GET /v1/models: %d %.400s; want the API's list with claude-sonnet-4-5", resp.StatusCode, got)
				}
			})
		}
	}
}

// sameError reports whether two error bodies are the same but for the
// request id, which each simulator answer makes anew.
func sameError(a, b string) bool {
	var x, y map[string]any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	delete(x, "request_id")
	delete(y, "request_id")
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// checkForwarded checks what reached the upstream of a request whose
// body was sent with the contract's headers.
func checkForwarded(t *testing.T, kind string, got cloudtest.Captured, sent string) {
	t.Helper()
	var body map[string]json.RawMessage
	if err := json.Unmarshal(got.Body, &body); err != nil {
		t.Fatalf("upstream body is not JSON: %v", err)
	}
	switch kind {
	case "anthropic", "foundry":
		if want := map[string]string{"anthropic": "/v1/messages", "foundry": "/anthropic/v1/messages"}[kind]; got.Path != want {
			t.Errorf("upstream path %s; want %s", got.Path, want)
		}
		if !bytes.Equal(got.Body, []byte(sent)) {
			t.Errorf("upstream body differs from the client's:\n got %s\nwant %s", got.Body, sent)
		}
		if got.Header.Get("Anthropic-Beta") != contractBetas || got.Header.Get("Anthropic-Version") != "2023-06-01" {
			t.Errorf("upstream saw anthropic-beta %q, anthropic-version %q; want them unchanged",
				got.Header.Get("Anthropic-Beta"), got.Header.Get("Anthropic-Version"))
		}
		return
	case "bedrock":
		var betas []string
		json.Unmarshal(body["anthropic_beta"], &betas)
		if strings.Join(betas, ",") != contractBetas || string(body["anthropic_version"]) != `"bedrock-2023-05-31"` {
			t.Errorf("Bedrock body anthropic_beta %v, anthropic_version %s; want the client's betas and bedrock-2023-05-31", betas, body["anthropic_version"])
		}
	case "vertex":
		if got.Header.Get("Anthropic-Beta") != contractBetas || string(body["anthropic_version"]) != `"vertex-2023-10-16"` {
			t.Errorf("Vertex anthropic-beta %q, anthropic_version %s; want the client's betas and vertex-2023-10-16", got.Header.Get("Anthropic-Beta"), body["anthropic_version"])
		}
	}
	var orig map[string]json.RawMessage
	json.Unmarshal([]byte(sent), &orig)
	for k, v := range orig {
		if k == "model" || k == "stream" {
			continue // the cloud's path carries them
		}
		if !bytes.Equal(body[k], v) {
			t.Errorf("%s body member %s = %s; want the client's %s", kind, k, body[k], v)
		}
	}
}
