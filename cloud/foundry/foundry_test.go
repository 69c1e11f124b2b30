package foundry

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/cloudtest"
	"github.com/sluicehq/sluice/internal/testcert"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// keyClient is a Foundry backend on the simulator that sends the key the
// router would put on each call; hdr are the simulator's test headers.
func keyClient(t *testing.T, url string, models map[string]string, hdr ...string) *Client {
	t.Helper()
	c, err := New(context.Background(), Options{Name: "azure", Endpoint: url + "/anthropic", Models: models, UseKeys: true, HTTPClient: cloudtest.Client(t, hdr...)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// call sends body to path through c as the router would: with the
// client's headers and key (the backend's, put on by route.Key.Authorize).
func call(t *testing.T, c *Client, path, body, key string) (*http.Response, string) {
	t.Helper()
	in := httptest.NewRequest(http.MethodPost, path, nil)
	in.Header.Set("Content-Type", "application/json")
	in.Header.Set("Anthropic-Version", "2023-06-01")
	in.Header.Set("Anthropic-Beta", "context-1m-2025-08-07")
	if key != "" {
		in.Header.Set("X-Api-Key", key)
	}
	resp, err := c.Do(context.Background(), in, strings.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	return resp, cloudtest.Body(t, resp)
}

const msgBody = `{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"hello"}]}`

func TestMessagesGoAsSent(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := keyClient(t, s.URL, nil)
	resp, body := call(t, c, "/v1/messages?beta=true", msgBody, cloudtest.FoundryAPIKey)
	var m struct {
		Type  string `json:"type"`
		Model string `json:"model"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &m) != nil || m.Type != "message" {
		t.Fatalf("%d %s; want a message", resp.StatusCode, body)
	}
	if resp.Header.Get("Request-Id") == "" {
		t.Error("no Request-Id on the answer")
	}
	got := s.Last(t)
	if got.Path != "/anthropic/v1/messages" || got.Query != "beta=true" || string(got.Body) != msgBody {
		t.Errorf("Foundry got %s?%s %s; want /anthropic/v1/messages?beta=true with the client's body byte for byte", got.Path, got.Query, got.Body)
	}
	if got.Header.Get("X-Api-Key") != cloudtest.FoundryAPIKey || got.Header.Get("Authorization") != "" {
		t.Errorf("Foundry got x-api-key %q, authorization %q; want the backend's key alone", got.Header.Get("X-Api-Key"), got.Header.Get("Authorization"))
	}
	if got.Header.Get("Anthropic-Version") != "2023-06-01" || got.Header.Get("Anthropic-Beta") != "context-1m-2025-08-07" {
		t.Errorf("Foundry got anthropic-version %q, anthropic-beta %q; want the client's", got.Header.Get("Anthropic-Version"), got.Header.Get("Anthropic-Beta"))
	}

	resp, body = call(t, c, "/v1/messages", strings.Replace(msgBody, `"max_tokens"`, `"stream":true,"max_tokens"`, 1), cloudtest.FoundryAPIKey)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || !strings.Contains(body, "event: message_stop") {
		t.Errorf("stream: %d %s %.300s; want the API's SSE", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	resp, body = call(t, c, "/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hello"}]}`, cloudtest.FoundryAPIKey)
	if resp.StatusCode != 200 || !strings.Contains(body, `"input_tokens"`) || s.Last(t).Path != "/anthropic/v1/messages/count_tokens" {
		t.Errorf("count_tokens: %d %s at %s", resp.StatusCode, body, s.Last(t).Path)
	}
}

func TestDeploymentNames(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := keyClient(t, s.URL, map[string]string{"claude-sonnet-4-5": "claude-haiku-4-5", "claude-haiku-4-5": ""})
	resp, body := call(t, c, "/v1/messages", msgBody, cloudtest.FoundryAPIKey)
	if resp.StatusCode != 200 || !strings.Contains(string(s.Last(t).Body), `"model":"claude-haiku-4-5"`) {
		t.Errorf("%d %s, sent %s; want the deployment's name as the model", resp.StatusCode, body, s.Last(t).Body)
	}
	n := len(s.Requests())
	resp, body = call(t, c, "/v1/messages", strings.Replace(msgBody, "claude-sonnet-4-5", "claude-haiku-4-5", 1), cloudtest.FoundryAPIKey)
	if resp.StatusCode != 400 || !strings.Contains(body, "not mapped on the foundry backend") || len(s.Requests()) != n {
		t.Errorf("an unmapped model: %d %s; want 400 from sluice, nothing sent", resp.StatusCode, body)
	}
	resp, body = call(t, c, "/v1/messages/batches", `{}`, cloudtest.FoundryAPIKey)
	if resp.StatusCode != 400 || !strings.Contains(body, "first-party") {
		t.Errorf("a batch: %d %s; want 400 pointing to a first-party backend", resp.StatusCode, body)
	}
}

func TestErrorsMapped(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	for _, tc := range []struct {
		name, fault, key string
		status           int
		typ              string
		retryAfter       bool
	}{
		{"a wrong key", "", "not-the-key", 401, "authentication_error", false},
		{"a rate limit", "429", cloudtest.FoundryAPIKey, 429, "rate_limit_error", true},
		{"an overload", "529", cloudtest.FoundryAPIKey, 529, "overloaded_error", false},
		{"a server error", "500", cloudtest.FoundryAPIKey, 500, "api_error", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hdr []string
			if tc.fault != "" {
				hdr = []string{"x-sim-fault", tc.fault}
			}
			resp, body := call(t, keyClient(t, s.URL, nil, hdr...), "/v1/messages", msgBody, tc.key)
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if resp.StatusCode != tc.status || json.Unmarshal([]byte(body), &e) != nil || e.Type != "error" || e.Error.Type != tc.typ {
				t.Errorf("%d %s; want %d %s in the API's shape", resp.StatusCode, body, tc.status, tc.typ)
			}
			if (resp.Header.Get("Retry-After") != "") != tc.retryAfter {
				t.Errorf("retry-after %q; want one: %v", resp.Header.Get("Retry-After"), tc.retryAfter)
			}
			if leaks := cloudtest.Leaks(tc.key, body); len(leaks) > 0 {
				t.Errorf("the key is in the answer: %s", body)
			}
		})
	}
}

func TestNoKeyIsADialFailure(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	in := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	_, err := keyClient(t, s.URL, nil).Do(context.Background(), in, strings.NewReader(msgBody), int64(len(msgBody)))
	if err == nil || len(s.Requests()) != 0 {
		t.Errorf("no key: %v, %d sent; want an error and nothing sent", err, len(s.Requests()))
	}
}

// entraAuthority is a Microsoft Entra ID authority on loopback TLS: its
// tenant's OpenID configuration and a token endpoint that gives token for
// the client-credentials grant of clientID and secret, for Foundry's
// scope only. It counts the tokens it gave.
func entraAuthority(t *testing.T, tenant, clientID, secret, token string) (*httptest.Server, *atomic.Int64, *http.Client) {
	t.Helper()
	certPEM, keyPEM, pool, err := testcert.New(7)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	var given atomic.Int64
	var srv *httptest.Server
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := srv.URL + "/" + tenant
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/"+tenant+"/v2.0/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]any{
				"token_endpoint": base + "/oauth2/v2.0/token", "authorization_endpoint": base + "/oauth2/v2.0/authorize",
				"issuer": base + "/v2.0", "jwks_uri": base + "/discovery/v2.0/keys",
			})
		case r.URL.Path == "/"+tenant+"/oauth2/v2.0/token":
			_ = r.ParseForm()
			if r.PostForm.Get("grant_type") != "client_credentials" || r.PostForm.Get("client_id") != clientID ||
				r.PostForm.Get("client_secret") != secret || !strings.Contains(" "+r.PostForm.Get("scope")+" ", " "+Scope+" ") {
				w.WriteHeader(http.StatusUnauthorized)
				_ = json.NewEncoder(w).Encode(map[string]any{"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."})
				return
			}
			given.Add(1)
			_ = json.NewEncoder(w).Encode(map[string]any{"token_type": "Bearer", "expires_in": 3600, "ext_expires_in": 3600, "access_token": token})
		default:
			http.NotFound(w, r)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return srv, &given, &http.Client{Transport: tr}
}

// TestEntraIDToken: without keys, each call carries a Microsoft Entra ID
// token that Azure's own identity library (a client-secret credential)
// fetched from the authority, once for many calls; a credential the
// authority refuses sends nothing and fails as a dial does.
func TestEntraIDToken(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	authority, given, hc := entraAuthority(t, "tenant-1", "app-1", "app-secret", cloudtest.FoundryToken)
	cred := func(secret string) azcore.TokenCredential {
		c, err := azidentity.NewClientSecretCredential("tenant-1", "app-1", secret, &azidentity.ClientSecretCredentialOptions{
			ClientOptions:            azcore.ClientOptions{Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: authority.URL + "/"}, Transport: hc, Retry: policy.RetryOptions{MaxRetries: -1}},
			DisableInstanceDiscovery: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c, err := New(context.Background(), Options{Name: "azure", Endpoint: s.URL + "/anthropic", Credential: cred("app-secret"), HTTPClient: cloudtest.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		resp, body := call(t, c, "/v1/messages", msgBody, "sk-the-clients-own")
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s; want a message", resp.StatusCode, body)
		}
	}
	got := s.Last(t)
	if got.Header.Get("Authorization") != "Bearer "+cloudtest.FoundryToken || got.Header.Get("X-Api-Key") != "" {
		t.Errorf("Foundry got authorization %q, x-api-key %q; want the Entra ID token alone", got.Header.Get("Authorization"), got.Header.Get("X-Api-Key"))
	}
	if n := given.Load(); n != 1 {
		t.Errorf("%d tokens fetched for 3 calls; want 1, cached by azidentity", n)
	}

	bad, err := New(context.Background(), Options{Name: "azure", Endpoint: s.URL + "/anthropic", Credential: cred("wrong-secret"), HTTPClient: cloudtest.Client(t)})
	if err != nil {
		t.Fatal(err)
	}
	n := len(s.Requests())
	in := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	_, err = bad.Do(context.Background(), in, strings.NewReader(msgBody), int64(len(msgBody)))
	if err == nil || len(s.Requests()) != n || strings.Contains(err.Error(), "wrong-secret") {
		t.Errorf("a refused credential: %v, %d sent; want an error without the secret and nothing sent", err, len(s.Requests())-n)
	}
}
