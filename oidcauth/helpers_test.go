package oidcauth

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/oidctest"
)

// fetchServiceToken does what an apiKeyHelper script's curl does: a
// client-credentials grant at the provider's token endpoint.
func fetchServiceToken(t *testing.T, p *oidctest.Provider, id, secret string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, p.Issuer()+"/oauth/token", strings.NewReader(url.Values{"grant_type": {"client_credentials"}, "scope": {"openid"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(id, secret)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Access string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("token endpoint: %s, %v", resp.Status, err)
	}
	return body.Access
}
