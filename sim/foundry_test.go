package sim_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/cloudtest"
)

// TestFoundryChecksItsCredentials: the Foundry paths take the resource's
// key in api-key or x-api-key, or the Entra ID token as a bearer, and
// refuse anything else in Azure's error JSON; a 429 keeps retry-after but
// none of the API's anthropic-ratelimit-* headers.
func TestFoundryChecksItsCredentials(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	body := `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`
	for _, tc := range []struct {
		name, header, value string
		want                int
	}{
		{"api-key", "Api-Key", cloudtest.FoundryAPIKey, 200},
		{"x-api-key", "X-Api-Key", cloudtest.FoundryAPIKey, 200},
		{"entra token", "Authorization", "Bearer " + cloudtest.FoundryToken, 200},
		{"the key as a bearer", "Authorization", "Bearer " + cloudtest.FoundryAPIKey, 401},
		{"a wrong key", "Api-Key", "nope", 401},
		{"none", "", "", 401},
	} {
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/anthropic/v1/messages", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		if tc.header != "" {
			req.Header.Set(tc.header, tc.value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got := cloudtest.Body(t, resp)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %s; want %d", tc.name, resp.StatusCode, got, tc.want)
		}
		if tc.want == 401 && !strings.Contains(got, `"code":"401"`) {
			t.Errorf("%s: %s; want Azure's error JSON", tc.name, got)
		}
		if tc.want == 200 && !strings.Contains(got, `"type":"message"`) {
			t.Errorf("%s: %s; want a message", tc.name, got)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/anthropic/v1/messages", strings.NewReader(body))
	req.Header.Set("Api-Key", cloudtest.FoundryAPIKey)
	req.Header.Set("X-Sim-Fault", "429")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got := cloudtest.Body(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(got, "rate_limit_error") {
		t.Errorf("429: %d retry-after %q %s; want a rate_limit_error with retry-after", resp.StatusCode, resp.Header.Get("Retry-After"), got)
	}
	for k := range resp.Header {
		if strings.HasPrefix(strings.ToLower(k), "anthropic-") {
			t.Errorf("Foundry answered with %s; Azure's front end sends none of the API's anthropic-* headers", k)
		}
	}
	if st := s.Stats().Backends["foundry"]; st.Requests != 7 {
		t.Errorf("foundry stats %+v; want 7 requests", st)
	}
}
