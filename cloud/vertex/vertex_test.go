package vertex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/oauth2"

	"github.com/sluicehq/sluice/internal/cloudtest"
	"github.com/sluicehq/sluice/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const hello = `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hello"}]}`

const predictPath = "/v1/projects/sim-project/locations/us-east5/publishers/anthropic/models/"

func newClient(t *testing.T, url string, ts oauth2.TokenSource, hdr ...string) *Client {
	t.Helper()
	if ts == nil {
		ts = oauth2.StaticTokenSource(&oauth2.Token{AccessToken: cloudtest.VertexToken})
	}
	c, err := New(context.Background(), Options{Name: "gcp", Project: "sim-project", Region: "us-east5", Endpoint: url,
		TokenSource: ts, HTTPClient: cloudtest.Client(t, hdr...)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRawPredict(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, nil)
	resp := cloudtest.Do(t, c, "/v1/messages", hello, "anthropic-beta", "context-1m-2025-08-07")
	body := cloudtest.Body(t, resp)
	var msg struct {
		Type    string                  `json:"type"`
		Content []struct{ Text string } `json:"content"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &msg) != nil || msg.Type != "message" || msg.Content[0].Text == "" {
		t.Fatalf("answer %d %s; want a message", resp.StatusCode, body)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || resp.Header.Get("Request-Id") == "" {
		t.Errorf("headers %v; want JSON with a Request-Id", resp.Header)
	}
	got := s.Last(t)
	if got.Path != predictPath+"claude-sonnet-4-5@20250929:rawPredict" {
		t.Errorf("path %q; want rawPredict of the mapped model", got.Path)
	}
	if got.Header.Get("Authorization") != "Bearer "+cloudtest.VertexToken || got.Header.Get("X-Api-Key") != "" || got.Header.Get("Anthropic-Version") != "" {
		t.Errorf("headers %v; want the bearer token, no client key or version", got.Header)
	}
	if got.Header.Get("Anthropic-Beta") != "context-1m-2025-08-07" {
		t.Errorf("anthropic-beta %q; want the client's", got.Header.Get("Anthropic-Beta"))
	}
	var sent map[string]json.RawMessage
	_ = json.Unmarshal(got.Body, &sent)
	if _, ok := sent["model"]; ok || string(sent["anthropic_version"]) != `"vertex-2023-10-16"` {
		t.Errorf("body %s; want no model and anthropic_version vertex-2023-10-16", got.Body)
	}
}

func TestStreamRawPredict(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, nil)
	resp := cloudtest.Do(t, c, "/v1/messages", strings.Replace(hello, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("answer %d %v; want an event stream", resp.StatusCode, resp.Header)
	}
	var names []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			names = append(names, n)
		}
	}
	resp.Body.Close()
	if len(names) < 5 || names[0] != "message_start" || names[len(names)-1] != "message_stop" {
		t.Errorf("events %v; want message_start … message_stop", names)
	}
	if got := s.Last(t).Path; got != predictPath+"claude-sonnet-4-5@20250929:streamRawPredict" {
		t.Errorf("path %q; want streamRawPredict", got)
	}
}

func TestCountTokens(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, nil)
	resp := cloudtest.Do(t, c, "/v1/messages/count_tokens", `{"model":"claude-haiku-4-5","messages":[{"role":"user","content":"hello"}]}`)
	body := cloudtest.Body(t, resp)
	var n struct {
		InputTokens int `json:"input_tokens"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &n) != nil || n.InputTokens < 1 {
		t.Fatalf("count_tokens %d %s; want input_tokens", resp.StatusCode, body)
	}
	got := s.Last(t)
	if got.Path != predictPath+"count-tokens:rawPredict" || !strings.Contains(string(got.Body), `"model":"claude-haiku-4-5@20251001"`) {
		t.Errorf("sent %s %s; want count-tokens:rawPredict naming the Vertex model in the body", got.Path, got.Body)
	}
}

func TestErrorsMapped(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	cloudtest.CheckErrors(t, `vertex backend "gcp"`, []cloudtest.ErrorCase{
		{Name: "exhausted", Fault: "429", Body: hello, Status: 429, Type: "rate_limit_error", Cause: "RESOURCE_EXHAUSTED"},
		{Name: "unavailable", Fault: "529", Body: hello, Status: 529, Type: "overloaded_error", Cause: "UNAVAILABLE"},
		{Name: "internal", Fault: "500", Body: hello, Status: 500, Type: "api_error", Cause: "INTERNAL"},
		// Claude's own refusal keeps the API's shape and words.
		{Name: "invalid", Fault: "", Body: `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hello"}]}`, Status: 400, Type: "invalid_request_error", Cause: "max_tokens", AsIs: true},
	}, func(hdr ...string) upstream.Backend { return newClient(t, s.URL, nil, hdr...) })
	t.Run("wrong token", func(t *testing.T) {
		ts := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "PLANTED-not-the-token"})
		resp := cloudtest.Do(t, newClient(t, s.URL, ts), "/v1/messages", hello)
		if resp.Header.Get("Www-Authenticate") != "" {
			t.Errorf("a challenge header reached the client")
		}
		body := cloudtest.WantError(t, resp, 401, "authentication_error", `vertex backend "gcp"`, "UNAUTHENTICATED", "check the Google credentials")
		if leaks := cloudtest.Leaks("PLANTED-not-the-token", body, fmt.Sprint(resp.Header)); len(leaks) > 0 {
			t.Errorf("the token leaked into the answer: %q", leaks)
		}
	})
}

// TestGoogleErrorShapes: a streaming method answers its error in a JSON
// array; each Google status maps.
func TestGoogleErrorShapes(t *testing.T) {
	var answer atomic.Value
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answer.Load().([2]string)
		w.Header().Set("Content-Type", "application/json")
		st := map[string]int{"PERMISSION_DENIED": 403, "INVALID_ARGUMENT": 400, "NOT_FOUND": 404}[a[0]]
		w.WriteHeader(st)
		_, _ = w.Write([]byte(a[1]))
	}))
	defer fake.Close()
	c := newClient(t, fake.URL, nil)
	for _, tc := range []struct {
		status, body string
		want         int
		typ          string
	}{
		{"PERMISSION_DENIED", `[{"error":{"code":403,"message":"Permission 'aiplatform.endpoints.predict' denied","status":"PERMISSION_DENIED"}}]`, 403, "permission_error"},
		{"INVALID_ARGUMENT", `{"error":{"code":400,"message":"Invalid JSON payload","status":"INVALID_ARGUMENT"}}`, 400, "invalid_request_error"},
		{"NOT_FOUND", `{"error":{"code":404,"message":"Publisher Model was not found","status":"NOT_FOUND"}}`, 404, "not_found_error"},
	} {
		answer.Store([2]string{tc.status, tc.body})
		cloudtest.WantError(t, cloudtest.Do(t, c, "/v1/messages", hello), tc.want, tc.typ, tc.status)
	}
}

func TestMapStatus(t *testing.T) {
	for _, c := range []struct {
		status string
		code   int
		want   int
		typ    string
	}{
		{"RESOURCE_EXHAUSTED", 429, 429, "rate_limit_error"},
		{"UNAVAILABLE", 503, 529, "overloaded_error"},
		{"INVALID_ARGUMENT", 400, 400, "invalid_request_error"},
		{"PERMISSION_DENIED", 403, 403, "permission_error"},
		{"UNAUTHENTICATED", 401, 401, "authentication_error"},
		{"DEADLINE_EXCEEDED", 504, 504, "timeout_error"},
		{"", 503, 529, "overloaded_error"},
		{"", 500, 500, "api_error"},
	} {
		if st, typ := mapStatus(c.status, c.code); st != c.want || typ != c.typ {
			t.Errorf("mapStatus(%q, %d) = %d %s; want %d %s", c.status, c.code, st, typ, c.want, c.typ)
		}
	}
}

// countingSource hands out tokens that live for life, counting fetches.
type countingSource struct {
	n    atomic.Int64
	life time.Duration
}

func (s *countingSource) Token() (*oauth2.Token, error) {
	s.n.Add(1)
	return &oauth2.Token{AccessToken: cloudtest.VertexToken, Expiry: time.Now().Add(s.life)}, nil
}

func TestTokenReusedUntilExpiry(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	long := &countingSource{life: time.Hour}
	c := newClient(t, s.URL, long)
	for range 3 {
		cloudtest.Body(t, cloudtest.Do(t, c, "/v1/messages", hello))
	}
	if n := long.n.Load(); n != 1 {
		t.Errorf("%d token fetches for 3 requests; want 1 (cached)", n)
	}
	// A token within oauth2's expiry margin (10s) is fetched again.
	short := &countingSource{life: 5 * time.Second}
	c = newClient(t, s.URL, short)
	for range 2 {
		cloudtest.Body(t, cloudtest.Do(t, c, "/v1/messages", hello))
	}
	if n := short.n.Load(); n != 2 {
		t.Errorf("%d fetches of a token about to expire for 2 requests; want 2", n)
	}
}

type failingSource struct{}

func (failingSource) Token() (*oauth2.Token, error) {
	return nil, errors.New("metadata server unreachable")
}

func TestNoTokenIsADialFailure(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, failingSource{})
	_, err := c.Do(context.Background(), httptest.NewRequest(http.MethodPost, "/v1/messages", nil), strings.NewReader(hello), int64(len(hello)))
	var ue *upstream.Error
	if !errors.As(err, &ue) || !ue.Dial {
		t.Errorf("Do without a token: %v; want an *upstream.Error with Dial set (nothing was sent)", err)
	}
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests sent without a token", n)
	}
}

func TestHosts(t *testing.T) {
	ts := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "x"})
	for region, want := range map[string]string{"global": "https://aiplatform.googleapis.com", "europe-west1": "https://europe-west1-aiplatform.googleapis.com"} {
		c, err := New(context.Background(), Options{Project: "p", Region: region, TokenSource: ts})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.b.Base.String(); got != want {
			t.Errorf("region %s: host %s; want %s", region, got, want)
		}
	}
	if _, err := New(context.Background(), Options{Region: "global", TokenSource: ts}); err == nil {
		t.Errorf("New without a project: no error")
	}
}

func TestUnmappedModelAndBatches(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	c := newClient(t, s.URL, nil)
	cloudtest.WantError(t, cloudtest.Do(t, c, "/v1/messages", strings.Replace(hello, "claude-sonnet-4-5", "claude-nonesuch-9", 1)), 400, "invalid_request_error", `"claude-nonesuch-9"`, `vertex backend "gcp"`)
	cloudtest.WantError(t, cloudtest.Do(t, c, "/v1/messages/batches", `{}`), 400, "invalid_request_error", "Message Batches are not offered")
	if n := len(s.Requests()); n != 0 {
		t.Errorf("%d requests reached Vertex; want none", n)
	}
}

func TestCacheControlKept(t *testing.T) {
	cfg := cloudtest.Config()
	cfg.MinCacheTokens = 64
	s := cloudtest.Start(t, cfg)
	c := newClient(t, s.URL, nil)
	body := cloudtest.CachedBody("claude-sonnet-4-5", true)
	resp := cloudtest.Do(t, c, "/v1/messages", body)
	if got := cloudtest.Body(t, resp); resp.StatusCode != 200 || !strings.Contains(got, `"cache_creation_input_tokens":`) || strings.Contains(got, `"cache_creation_input_tokens":0,`) {
		t.Errorf("answer %d %.300s; want a stream that wrote the cache", resp.StatusCode, got)
	}
	want := cloudtest.CacheControls(t, []byte(body))
	if got := cloudtest.CacheControls(t, s.Last(t).Body); len(want) != 4 || !reflect.DeepEqual(got, want) {
		t.Errorf("cache_control at Vertex %v; want the client's %v", got, want)
	}
}

// TestApplicationDefaultCredentials: with no token source, the key file
// GOOGLE_APPLICATION_CREDENTIALS names is found, its token fetched from
// its token endpoint once and reused.
func TestApplicationDefaultCredentials(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	file, fetched := cloudtest.ServiceAccount(t)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)
	for _, opt := range []Options{{}, {CredentialsFile: file}} {
		fetched.Store(0)
		opt.Project, opt.Region, opt.Endpoint, opt.HTTPClient = "sim-project", "us-east5", s.URL, cloudtest.Client(t)
		c, err := New(context.Background(), opt)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			resp := cloudtest.Do(t, c, "/v1/messages", hello)
			if body := cloudtest.Body(t, resp); resp.StatusCode != 200 {
				t.Fatalf("file %q: %d %s", opt.CredentialsFile, resp.StatusCode, body)
			}
		}
		if n := fetched.Load(); n != 1 {
			t.Errorf("file %q: %d token fetches for 2 requests; want 1", opt.CredentialsFile, n)
		}
	}
	other := t.TempDir() + "/other.json"
	_ = os.WriteFile(other, []byte(`{"type":"impersonated_service_account"}`), 0o600)
	if _, err := New(context.Background(), Options{Project: "p", Region: "global", CredentialsFile: other}); err == nil || !strings.Contains(err.Error(), "impersonated_service_account") {
		t.Errorf("a file of another type: %v; want it refused by its type", err)
	}
}

// TestOfficialSDKThroughBackend: the Go SDK, speaking the Messages API to
// a relay in front of this backend, accepts every answer.
func TestOfficialSDKThroughBackend(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	cloudtest.CheckWithSDK(t, "claude-sonnet-4-5", func(hdr ...string) upstream.Backend {
		return newClient(t, s.URL, nil, hdr...)
	})
}

// hangingSource is a token endpoint that never answers until released.
type hangingSource struct{ release chan struct{} }

func (s hangingSource) Token() (*oauth2.Token, error) {
	<-s.release
	return nil, errors.New("token endpoint gave up")
}

// TestHungTokenFetchKeepsToTheRequestsContext: a token fetch that hangs
// (a metadata server or token endpoint that accepts and never answers)
// ends the call when the request's context ends, as a dial that hangs
// would, rather than holding the request (and its slot) for ever.
func TestHungTokenFetchKeepsToTheRequestsContext(t *testing.T) {
	s := cloudtest.Start(t, cloudtest.Config())
	src := hangingSource{release: make(chan struct{})}
	c := newClient(t, s.URL, src)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, httptest.NewRequest(http.MethodPost, "/v1/messages", nil), strings.NewReader(hello), int64(len(hello)))
		done <- err
	}()
	select {
	case err := <-done:
		var ue *upstream.Error
		if !errors.As(err, &ue) || !ue.Dial {
			t.Errorf("Do with a hung token fetch: %v; want an *upstream.Error with Dial set", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Do hung on the token fetch past its context's end")
		close(src.release)
		<-done
		return
	}
	close(src.release) // the fetch left behind ends too
}
