package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/cloudtest"
)

// TestModelsListNotSentToACloud: with a cloud backend declared before a
// first-party one, GET /v1/models (which a cloud does not serve) goes to
// the first-party backend, not to the cloud that would answer 404.
func TestModelsListNotSentToACloud(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	cloudtest.DefaultChains(t)
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"data":[{"type":"model","id":"claude-sonnet-4-5"}],"has_more":false}`)
	}))
	t.Cleanup(first.Close)
	u, _ := url.Parse(first.URL)
	t.Setenv("SLUICE_TEST_FIRST_PARTY_KEY", "sk-ant-first-party")
	base := cloudSluice(t, true,
		config.Backend{Name: "aws", Kind: "bedrock", Region: "us-east-1", Endpoint: s.URL},
		config.Backend{Name: "api", Kind: "anthropic", URL: u, Keys: []string{"env:SLUICE_TEST_FIRST_PARTY_KEY"}})
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
		req.Header.Set("X-Api-Key", "sk-ant-client-key")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /v1/models: %d %s; want the first-party backend's list", resp.StatusCode, body)
		}
	}
}
