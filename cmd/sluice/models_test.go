package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	anthropic "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/sluicehq/sluice/cloud/bedrock"
	"github.com/sluicehq/sluice/cloud/vertex"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/cloudtest"
	"github.com/sluicehq/sluice/proxy"
)

// keyedCloudSluice is cloudSluice with sluice keys: each entry of keys is
// a keys-file entry's extra members by the key's name; the key itself is
// "sk-sluice-NAME".
func keyedCloudSluice(t *testing.T, keys map[string]string, backends ...config.Backend) string {
	t.Helper()
	var entries []string
	for name, extra := range keys {
		sum := sha256.Sum256([]byte("sk-sluice-" + name))
		e := fmt.Sprintf(`{"name":%q,"sha256":%q`, name, hex.EncodeToString(sum[:]))
		if extra != "" {
			e += "," + extra
		}
		entries = append(entries, e+"}")
	}
	file := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(file, []byte(`{"keys":[`+strings.Join(entries, ",")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := proxy.LoadInbound(proxy.InboundOptions{KeysFile: file, UpstreamKey: "sk-ant-held-unused"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Enabled = true
	cfg.UpstreamURL, _ = url.Parse("http://127.0.0.1:1") // unused: every call is routed
	cfg.Backends = backends
	return serveParts(t, cfg, nil, in)
}

func listModels(t *testing.T, base, key string) []string {
	t.Helper()
	c := anthropic.NewClient(option.WithAPIKey(key), option.WithBaseURL(base), option.WithMaxRetries(0))
	var ids []string
	pager := c.Models.ListAutoPaging(context.Background(), anthropic.ModelListParams{Limit: anthropic.Int(3)})
	for pager.Next() {
		m := pager.Current()
		if m.DisplayName == "" || m.CreatedAt.IsZero() && !strings.Contains(m.ID, "claude") {
			t.Errorf("model %+v: want a display name and a date", m)
		}
		ids = append(ids, m.ID)
	}
	if err := pager.Err(); err != nil {
		t.Fatalf("models.list through sluice: %v", err)
	}
	return ids
}

// TestModelDiscoveryFromCloudTables: a sluice whose backends are all
// clouds answers GET /v1/models itself, from the backends' model tables
// (which no cloud serves as a list), paged as the API pages so the
// official SDK's auto-pager walks it; each sluice key sees only the
// models of the backends and the model list it may use, and GET
// /v1/models/{id} answers 404 for a model it may not reach.
func TestModelDiscoveryFromCloudTables(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	sa := cloudtest.DefaultChains(t)
	base := keyedCloudSluice(t, map[string]string{
		"all":    "",
		"aws":    `"backends":["aws"]`,
		"sonnet": `"models":["claude-sonnet-4*"]`,
	},
		config.Backend{Name: "aws", Kind: "bedrock", Region: "us-east-1", Endpoint: s.URL,
			Models: map[string]string{"claude-opus-4-1": "", "my-claude-custom": "arn:aws:bedrock:us-east-1:1:application-inference-profile/x"}},
		config.Backend{Name: "gcp", Kind: "vertex", Region: "us-east5", Project: "sim-project", Endpoint: s.URL, CredentialsFile: sa})
	before := len(s.Requests())

	var wantAll []string
	for id := range bedrock.DefaultModels() {
		if id != "claude-opus-4-1" {
			wantAll = append(wantAll, id)
		}
	}
	wantAll = append(wantAll, "my-claude-custom")
	for id := range vertex.DefaultModels() {
		if !slices.Contains(wantAll, id) {
			wantAll = append(wantAll, id)
		}
	}
	got := listModels(t, base, "sk-sluice-all")
	if !sameSet(got, wantAll) {
		t.Errorf("key all lists %v; want the union of both tables %v", got, wantAll)
	}
	if i, j := slices.Index(got, "claude-opus-4-6"), slices.Index(got, "claude-3-haiku-20240307"); i < 0 || j < 0 || i > j {
		t.Errorf("list %v: want newest first (opus 4.6 before haiku 3)", got)
	}
	if got := listModels(t, base, "sk-sluice-aws"); slices.Contains(got, "claude-opus-4-1") || !slices.Contains(got, "my-claude-custom") {
		t.Errorf("key aws lists %v; want Bedrock's table as configured (no opus 4.1, the custom id)", got)
	}
	for _, id := range listModels(t, base, "sk-sluice-sonnet") {
		if !strings.HasPrefix(id, "claude-sonnet-4") {
			t.Errorf("key sonnet lists %q; its key may call only claude-sonnet-4*", id)
		}
	}

	get := func(key, id string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/models/"+id, nil)
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("sk-sluice-all", "claude-sonnet-4-5"); code != 200 || !strings.Contains(body, `"display_name":"Claude Sonnet 4.5"`) {
		t.Errorf("GET claude-sonnet-4-5: %d %s", code, body)
	}
	for _, c := range []struct{ key, id string }{{"sk-sluice-all", "claude-nope-9"}, {"sk-sluice-aws", "claude-opus-4-1"}} {
		code, body := get(c.key, c.id)
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if json.Unmarshal([]byte(body), &e) != nil || code != 404 || e.Type != "error" || e.Error.Type != "not_found_error" || !strings.Contains(e.Error.Message, c.id) {
			t.Errorf("GET %s with %s: %d %s; want 404 not_found_error naming it", c.id, c.key, code, body)
		}
	}
	if code, _ := get("sk-sluice-sonnet", "claude-opus-4-6"); code != 403 {
		t.Errorf("GET a model the key may not call: %d; want 403", code)
	}
	if n := len(s.Requests()); n != before {
		t.Errorf("the clouds saw %d model calls; a model list never goes to a cloud", n-before)
	}
}

// TestModelListCutToTheKeysModels: with a first-party backend the
// upstream answers the list, and a sluice key with a model list sees
// only its models, the page's cursors kept so paging walks the rest.
func TestModelListCutToTheKeysModels(t *testing.T) {
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"data":[{"type":"model","id":"claude-opus-4-6","display_name":"Claude Opus 4.6","created_at":"2026-02-05T00:00:00Z"},`+
			`{"type":"model","id":"claude-sonnet-4-5","display_name":"Claude Sonnet 4.5","created_at":"2025-09-29T00:00:00Z"}],"has_more":true,"first_id":"claude-opus-4-6","last_id":"claude-sonnet-4-5"}`)
	}))
	t.Cleanup(first.Close)
	u, _ := url.Parse(first.URL)
	t.Setenv("SLUICE_TEST_FIRST_PARTY_KEY", "sk-ant-first-party")
	base := keyedCloudSluice(t, map[string]string{"sonnet": `"models":["claude-sonnet-*"]`, "all": ""},
		config.Backend{Name: "api", Kind: "anthropic", URL: u, Keys: []string{"env:SLUICE_TEST_FIRST_PARTY_KEY"}})
	get := func(key string) (http.Header, string) { // gzip asked: sluice must still read the list to cut it
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, b)
		}
		return resp.Header, string(b)
	}
	_, body := get("sk-sluice-sonnet")
	if strings.Contains(body, "claude-opus-4-6\",\"display") || !strings.Contains(body, `"id":"claude-sonnet-4-5"`) ||
		!strings.Contains(body, `"has_more":true`) || !strings.Contains(body, `"last_id":"claude-sonnet-4-5"`) {
		t.Errorf("key sonnet got %s; want only sonnet, the cursors kept", body)
	}
	if _, body := get("sk-sluice-all"); !strings.Contains(body, `"id":"claude-opus-4-6"`) {
		t.Errorf("key all got %s; want the upstream's list whole", body)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
