package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
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

// TestBatchesOnACloudOnlySluice: Message Batches go only to a first-party
// backend; with clouds alone, a batch request is the 400
// invalid_request_error docs/clouds.md promises, saying batches need an
// Anthropic backend (it was 403 "the sluice key \"\" may use only the
// backends none").
func TestBatchesOnACloudOnlySluice(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	cloudtest.DefaultChains(t)
	base := cloudSluice(t, false, config.Backend{Name: "aws", Kind: "bedrock", Region: "us-east-1", Endpoint: s.URL})
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/messages/batches", `{"requests":[{"custom_id":"a","params":{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}}]}`},
		{http.MethodGet, "/v1/messages/batches", ""},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
		req.Header.Set("X-Api-Key", "sk-ant-client-key")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(body), `"invalid_request_error"`) || !strings.Contains(string(body), "Anthropic backend") || strings.Contains(string(body), `\"\"`) {
			t.Errorf("%s %s: %d %s; want 400 invalid_request_error saying batches need an Anthropic backend", c.method, c.path, resp.StatusCode, body)
		}
	}
}

// TestCloudCredentialFailureSaysWhatToCheck: a Vertex backend whose
// service account is refused at Google's token endpoint answers 502
// naming the backend's credentials as the thing to check, not
// UPSTREAM_URL, which a routed sluice does not use.
func TestCloudCredentialFailureSaysWhatToCheck(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	sa := cloudtest.DefaultChains(t)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, `{"error":"invalid_client","error_description":"The OAuth client was not found."}`)
	}))
	t.Cleanup(refusing.Close)
	raw, err := os.ReadFile(sa)
	if err != nil {
		t.Fatal(err)
	}
	var acct map[string]string
	json.Unmarshal(raw, &acct)
	acct["token_uri"] = refusing.URL + "/token"
	raw, _ = json.Marshal(acct)
	os.WriteFile(sa, raw, 0o600)
	base := cloudSluice(t, false, config.Backend{Name: "gcp", Kind: "vertex", Region: "us-east5", Project: "sim-project", Endpoint: s.URL, CredentialsFile: sa})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", "sk-ant-client-key")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || strings.Contains(string(body), "UPSTREAM_URL") || !strings.Contains(string(body), "credentials") {
		t.Errorf("a refused service account: %d %s; want 502 naming the backend's credentials, not UPSTREAM_URL", resp.StatusCode, body)
	}
}

// TestBrokenCloudStreamLogNamesTheBackend: a Bedrock stream that breaks is
// logged with the backend it came from, not UPSTREAM_URL, which a routed
// sluice does not call.
func TestBrokenCloudStreamLogNamesTheBackend(t *testing.T) {
	cloudtest.DefaultChains(t)
	// A Bedrock endpoint whose stream breaks inside its first frame.
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte{0, 0, 1, 0, 0, 0, 0})
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(s.Close)
	var logs syncBuffer
	base := cloudSluiceLog(t, false, slog.New(slog.NewTextHandler(&logs, nil)),
		config.Backend{Name: "aws", Kind: "bedrock", Region: "us-east-1", Endpoint: s.URL})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", "sk-ant-client-key")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "level=WARN") && strings.Contains(l, "upstream stream") {
			line = l
		}
	}
	if line == "" || strings.Contains(line, "127.0.0.1:1") || !strings.Contains(line, "aws/1") {
		t.Errorf("the broken stream's warning %q (log %q); want it to name backend aws/1, not UPSTREAM_URL", line, logs.String())
	}
}

// syncBuffer is a strings.Builder safe to write from the server's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
