package clients

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/oidctest"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sim"
)

// The secrets of the gateway test: each must stay where it belongs.
const (
	gatewayClientID     = "claude-gateway"
	gatewayClientSecret = "gateway-oidc-client-secret-0123456789"
	gatewaySessionKey   = "gateway-session-jwt-secret-0123456789abcdef"
	gatewaySluiceKey    = "sk-sluice-gateway-0123456789abcdef" // the gateway's key to sluice
	gatewayUpstreamKey  = "sk-ant-held-by-sluice-0123456789"   // sluice's key to the API
)

// seenRequest is one request as a recording hop saw it.
type seenRequest struct {
	path   string
	header http.Header
	body   []byte
}

// hopLog records every request that passes a point of the chain.
type hopLog struct {
	mu   sync.Mutex
	seen []seenRequest
}

func (l *hopLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		l.mu.Lock()
		l.seen = append(l.seen, seenRequest{r.URL.Path, r.Header.Clone(), body})
		l.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func (l *hopLog) all() []seenRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seenRequest(nil), l.seen...)
}

// syncBuffer is a log written by one goroutine or process and read by
// the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
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

// gatewayRig is Anthropic's real gateway (claude gateway, from the pinned
// Claude Code) in front of sluice, with a real OpenID Connect provider
// and PostgreSQL, and the simulator as sluice's upstream.
type gatewayRig struct {
	idp      *oidctest.Provider
	gateway  string  // the gateway's base URL
	sluice   string  // sluice's base URL
	arrived  *hopLog // what reached sluice from the gateway
	upstream *hopLog // what sluice sent its upstream
	// sluiceLog is sluice's log (JSON); gatewayLog the gateway's output.
	sluiceLog, gatewayLog syncBuffer
}

// rateLimitMarker in a prompt makes the upstream answer that request
// with rateLimited, as an API key past its limit would.
const rateLimitMarker = "PLEASE-RATE-LIMIT-THIS"

// rateLimited is the upstream's 429: a retry-after past both sluice's
// deadline and Claude Code's 60 s, so neither tries it again.
var rateLimited = struct {
	body    string
	headers map[string]string
}{`{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50 requests per minute."},"request_id":"req_upstream_429"}`,
	map[string]string{"Retry-After": "61", "Anthropic-Ratelimit-Requests-Limit": "50", "Anthropic-Ratelimit-Requests-Remaining": "0",
		"Anthropic-Ratelimit-Requests-Reset": "2026-12-06T18:00:00Z", "X-Should-Retry": "true"}}

func startGatewayRig(t *testing.T, bin string, budgets []budget.Spec) *gatewayRig {
	t.Helper()
	rig := &gatewayRig{arrived: &hopLog{}, upstream: &hopLog{}}
	dsn := pgtest.Start(t)
	rig.idp = oidctest.Start(t)

	// The simulator, as sluice's upstream, behind a recorder.
	scfg := sim.DefaultConfig()
	scfg.Seed = 1
	s := sim.New(scfg)
	up := httptest.NewServer(rig.upstream.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(rateLimitMarker)) {
			r.Body = io.NopCloser(bytes.NewReader(body))
			s.ServeHTTP(w, r)
			return
		}
		for k, v := range rateLimited.headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, rateLimited.body)
	})))
	t.Cleanup(func() { up.Close(); s.Close() })

	// sluice, windowed at its defaults, holding the API key; the gateway
	// is its one client, with a sluice key of its own.
	sum := sha256.Sum256([]byte(gatewaySluiceKey))
	keys := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keys, []byte(`{"keys":[{"name":"claude-gateway","sha256":"`+hex.EncodeToString(sum[:])+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := proxy.LoadInbound(proxy.InboundOptions{KeysFile: keys, UpstreamKey: gatewayUpstreamKey})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Enabled = true
	cfg.TenantFrom = config.TenantFromGateway
	cfg.InboundKeysFile = keys
	cfg.Budgets = budgets
	cfg.UpstreamURL, _ = url.Parse(up.URL)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rig.sluice = "http://" + ln.Addr().String()
	cfg.PublicURL, _ = url.Parse(rig.sluice)
	log := slog.New(slog.NewJSONHandler(&rig.sluiceLog, nil))
	parts, err := assemble.Build(cfg, assemble.Env{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(cfg, proxy.Options{Logger: log, Parts: *parts, Inbound: in})
	if err != nil {
		t.Fatal(err)
	}
	stop := (&proxy.Server{Proxy: p, Handler: rig.arrived.wrap(p), Log: log}).Start(ln)
	t.Cleanup(func() { stop() })

	// The gateway: its IdP is the provider, its store PostgreSQL, its one
	// upstream sluice, with the developer's identity forwarded.
	port := pgtest.FreePort(t)
	rig.gateway = fmt.Sprintf("http://127.0.0.1:%d", port)
	rig.idp.AddClient(gatewayClientID, gatewayClientSecret, rig.gateway+"/oauth/callback")
	dir := t.TempDir()
	conf := filepath.Join(dir, "gateway.yaml")
	yaml := fmt.Sprintf(gatewayYAML, port, rig.gateway, rig.idp.Issuer(), gatewayClientID, dsn, rig.sluice)
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "gateway", "--config", conf)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "CLAUDE_GATEWAY_ALLOW_LOOPBACK=1",
		"GATEWAY_OIDC_SECRET="+gatewayClientSecret, "GATEWAY_SESSION_KEY="+gatewaySessionKey, "GATEWAY_SLUICE_KEY="+gatewaySluiceKey)
	cmd.Stdout, cmd.Stderr = &rig.gatewayLog, &rig.gatewayLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(rig.gateway + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway was not ready within 30 s (%v)\n%s", err, rig.gatewayLog.String())
		}
	}
	return rig
}

// gatewayYAML is the gateway's configuration: its port and public URL,
// the IdP's issuer and client, its PostgreSQL, and sluice as its one
// Anthropic upstream. Secrets come from its environment, as the
// gateway's documentation asks.
const gatewayYAML = `listen:
  host: 127.0.0.1
  port: %d
  public_url: %s
oidc:
  issuer: %s
  client_id: %s
  client_secret: ${GATEWAY_OIDC_SECRET}
session:
  jwt_secret: ${GATEWAY_SESSION_KEY}
  ttl_hours: 1
store:
  postgres_url: %s
upstreams:
  - name: sluice
    provider: anthropic
    base_url: %s
    auth:
      api_key: ${GATEWAY_SLUICE_KEY}
    forward_user_identity: true
`

// signIn signs u in to the gateway as Claude Code's /login and the
// developer's browser would, and returns the gateway's bearer token: the
// device authorization Claude Code asks for; in the browser's place, the
// verification page with the code, the provider's sign-in, and the
// gateway's callback; then Claude Code's token poll.
func (rig *gatewayRig) signIn(t *testing.T, u oidctest.User) string {
	t.Helper()
	ctx := t.Context()
	var dev struct {
		DeviceCode      string `json:"device_code"`
		UserCode        string `json:"user_code"`
		VerificationURI string `json:"verification_uri"`
	}
	gatewayForm(t, rig.gateway+"/oauth/device_authorization", url.Values{"surface": {"claude_code"}}, &dev)

	// The browser: the verification page, with the code the developer
	// types; the gateway sends it on to the provider, which signs u in
	// and sends it back to the gateway's callback.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, dev.VerificationURI, strings.NewReader(url.Values{"user_code": {dev.UserCode}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", rig.gateway) // as a browser posts a form of the page's own origin
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("the verification page answered %s, not a redirect to the IdP:\n%.2000s", resp.Status, page)
	}
	back, err := rig.idp.LogIn(ctx, u, resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, back.String(), nil)
	resp, err = browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the gateway's callback answered %s:\n%.2000s\n%s", resp.Status, page, rig.gatewayLog.String())
	}

	var tok struct {
		AccessToken string `json:"access_token"`
		Email       string `json:"email"`
	}
	gatewayForm(t, rig.gateway+"/oauth/token", url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"}, "device_code": {dev.DeviceCode}}, &tok)
	if tok.AccessToken == "" {
		t.Fatalf("the token poll gave no access token (email %q)", tok.Email)
	}
	return tok.AccessToken
}

// gatewayForm posts form to one of the gateway's OAuth endpoints, as
// Claude Code does, and decodes its JSON answer into v.
func gatewayForm(t *testing.T, endpoint string, form url.Values, v any) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", "claude-code/2.1.332")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s answered %s: %s", endpoint, resp.Status, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s: %v: %s", endpoint, err, body)
	}
}

// claudeThroughGateway runs one `claude -p` signed in to the gateway with
// token, as Claude Desktop starts Claude Code in gateway mode
// (CLAUDE_CODE_USE_GATEWAY with the gateway's URL and bearer).
func (rig *gatewayRig) claudeThroughGateway(ctx context.Context, bin, token, prompt string) (claudeResult, string, error) {
	home, err := os.MkdirTemp("", "sluice-claude-gateway-")
	if err != nil {
		return claudeResult{}, "", err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, bin, "-p", prompt, "--output-format", "json")
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "HOME="+home, "CLAUDE_CODE_USE_GATEWAY=1", "ANTHROPIC_BASE_URL="+rig.gateway, "ANTHROPIC_AUTH_TOKEN="+token,
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var res claudeResult
	if jerr := json.Unmarshal(out, &res); err == nil && jerr != nil {
		err = jerr
	}
	return res, string(out) + stderr.String(), err
}

// TestClaudeCodeThroughAnthropicGateway runs Anthropic's real gateway
// (claude gateway, from the pinned Claude Code) in front of sluice, with
// a real OpenID Connect provider and PostgreSQL: two developers sign in
// through it, each runs a real Claude Code in gateway mode, and the test
// shows what reaches sluice (the gateway's sluice key and the developer's
// identity, no developer token) and its upstream (sluice's key, no
// identity), that each developer is a tenant of its own in sluice, that a
// budget on one answers 402 through the gateway while the other goes on,
// that the upstream's 429 reaches the developer intact, that a developer
// cannot pass as another through the gateway, and that only the
// gateway's key gets into sluice.
//
// The one step a person does is the browser's: opening the verification
// page, typing the code and signing in at the IdP. The test does it in the
// browser's place with plain HTTP requests (signIn), and hands the token
// to Claude Code as Claude Desktop does (CLAUDE_CODE_USE_GATEWAY).
func TestClaudeCodeThroughAnthropicGateway(t *testing.T) {
	requireClients(t)
	bin := claudeBinary(t)
	ana := oidctest.User{Subject: "sub-ana", Email: "ana@example.com", Groups: []string{"eng"}}
	bob := oidctest.User{Subject: "sub-bob", Email: "bob@example.com", Groups: []string{"eng"}}
	// bob may spend one token a day: his first request is let through
	// (nothing spent yet), its usage spends the budget, and the next is
	// refused.
	bobBudget := budget.Spec{Tenant: bob.Email, Unit: budget.Tokens, Limit: 1, Period: budget.Day}
	if err := bobBudget.Check(); err != nil {
		t.Fatal(err)
	}
	rig := startGatewayRig(t, bin, []budget.Spec{bobBudget})
	tokens := map[string]string{ana.Email: rig.signIn(t, ana), bob.Email: rig.signIn(t, bob)}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	type run struct {
		res claudeResult
		out string
		err error
	}
	both := func() (a, b run) {
		var wg sync.WaitGroup
		wg.Go(func() {
			a.res, a.out, a.err = rig.claudeThroughGateway(ctx, bin, tokens[ana.Email], "Say hello in five words.")
		})
		wg.Go(func() {
			b.res, b.out, b.err = rig.claudeThroughGateway(ctx, bin, tokens[bob.Email], "Say hello in five words.")
		})
		wg.Wait()
		return a, b
	}
	// Together: both are served (bob's first request fits his budget).
	a, b := both()
	if a.err != nil || a.res.Subtype != "success" || a.res.IsError {
		t.Fatalf("ana's first claude -p: %v %+v\n%.3000s", a.err, a.res, a.out)
	}
	if !rig.servedTenant(t, bob.Email) {
		t.Fatalf("sluice served no request of bob's first run: %v %+v\n%.3000s", b.err, b.res, b.out)
	}
	// Again: bob's budget is spent, so sluice answers 402 and Claude Code
	// stops with it; ana goes on.
	a, b = both()
	if a.err != nil || a.res.Subtype != "success" || a.res.IsError {
		t.Errorf("ana's second claude -p, beside bob's refusal: %v %+v\n%.3000s", a.err, a.res, a.out)
	}
	if !b.res.IsError || !strings.Contains(b.out, "402") || !strings.Contains(b.out, bobBudget.Name) {
		t.Errorf("bob's claude -p past his budget: %v %+v; want an error naming 402 and the budget %q\n%.3000s", b.err, b.res, bobBudget.Name, b.out)
	}

	rig.checkWhatReachedSluice(t, map[string]string{ana.Email: ana.Subject, bob.Email: bob.Subject}, tokens)
	rig.checkTenants(t, ana.Email, bob.Email, bobBudget.Name)
	rig.checkRateLimitPassesThrough(t, ana.Email, tokens[ana.Email])
	rig.checkOnlyTheGatewayNamesDevelopers(t)
}

// servedTenant tells whether sluice's access log has a line of tenant's
// answered 200.
func (rig *gatewayRig) servedTenant(t *testing.T, tenant string) bool {
	for _, l := range rig.accessLines(t) {
		if l.Tenant == tenant && l.Status == http.StatusOK {
			return true
		}
	}
	return false
}

// accessLine is what the test reads of one of sluice's access lines.
type accessLine struct {
	Msg    string `json:"msg"`
	Path   string `json:"path"`
	Tenant string `json:"tenant"`
	Status int    `json:"status"`
}

func (rig *gatewayRig) accessLines(t *testing.T) []accessLine {
	t.Helper()
	var out []accessLine
	sc := bufio.NewScanner(strings.NewReader(rig.sluiceLog.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l accessLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "request" {
			out = append(out, l)
		}
	}
	return out
}

// checkWhatReachedSluice: every request from the gateway carries the
// gateway's sluice key and a signed-in developer's email and subject,
// and no developer's bearer token; sluice sends its upstream its own key
// and none of the gateway's identity headers; no secret is in sluice's
// log.
func (rig *gatewayRig) checkWhatReachedSluice(t *testing.T, subjects map[string]string, tokens map[string]string) {
	t.Helper()
	arrived, upstream := rig.arrived.all(), rig.upstream.all()
	if len(arrived) == 0 || len(upstream) == 0 {
		t.Fatalf("%d requests reached sluice, %d its upstream", len(arrived), len(upstream))
	}
	for i, r := range arrived {
		email := r.header.Get("X-Claude-Gateway-User-Email")
		if sub, ok := subjects[email]; !ok || r.header.Get("X-Claude-Gateway-User-Id") != sub || r.header.Get("X-Litellm-End-User-Id") != email {
			t.Errorf("request %d to sluice (%s) names developer %q, subject %q", i, r.path, email, r.header.Get("X-Claude-Gateway-User-Id"))
		}
		if r.header.Get("X-Api-Key") != gatewaySluiceKey || r.header.Get("Authorization") != "" {
			t.Errorf("request %d to sluice: x-api-key %q, authorization %q; want the gateway's sluice key alone", i, r.header.Get("X-Api-Key"), r.header.Get("Authorization"))
		}
		if !strings.Contains(r.header.Get("User-Agent"), "cc-gateway/") {
			t.Errorf("request %d to sluice: user-agent %q; want the gateway's mark", i, r.header.Get("User-Agent"))
		}
	}
	for i, r := range upstream {
		if r.header.Get("X-Api-Key") != gatewayUpstreamKey {
			t.Errorf("request %d upstream: x-api-key %q; want sluice's own", i, r.header.Get("X-Api-Key"))
		}
		for _, h := range []string{"X-Claude-Gateway-User-Email", "X-Claude-Gateway-User-Id", "X-Litellm-End-User-Id"} {
			if v := r.header.Get(h); v != "" {
				t.Errorf("request %d upstream carries %s: %q", i, h, v)
			}
		}
	}
	secrets := map[string]string{"the gateway's sluice key": gatewaySluiceKey, "the OIDC client secret": gatewayClientSecret, "the gateway's session key": gatewaySessionKey}
	for email, tok := range tokens {
		secrets[email+"'s gateway token"] = tok
	}
	for what, secret := range secrets {
		for i, r := range upstream {
			if bytes.Contains(r.body, []byte(secret)) || strings.Contains(fmt.Sprint(r.header), secret) {
				t.Errorf("%s reached the upstream in request %d", what, i)
			}
		}
		if what != "the gateway's sluice key" {
			for i, r := range arrived {
				if bytes.Contains(r.body, []byte(secret)) || strings.Contains(fmt.Sprint(r.header), secret) {
					t.Errorf("%s reached sluice in request %d", what, i)
				}
			}
		}
		if strings.Contains(rig.sluiceLog.String(), secret) {
			t.Errorf("%s is in sluice's log", what)
		}
	}
	if strings.Contains(rig.sluiceLog.String(), gatewayUpstreamKey) {
		t.Error("sluice's upstream key is in its log")
	}
}

// checkTenants: each developer is a tenant of sluice's own, in its
// metrics and its access lines; bob's refusals are 402s of his.
func (rig *gatewayRig) checkTenants(t *testing.T, ana, bob, bobBudget string) {
	t.Helper()
	resp, err := http.Get(rig.sluice + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, tenant := range []string{ana, bob} {
		if n := counter(string(page), `sluice_tenant_served_requests_total{tenant="`+tenant+`"}`); n < 1 {
			t.Errorf("sluice's metrics count %d requests served for tenant %s:\n%s", n, tenant, grepLines(string(page), "sluice_tenant_served"))
		}
	}
	refused := 0
	for _, l := range rig.accessLines(t) {
		if l.Path != "/v1/messages" {
			continue
		}
		if l.Tenant != ana && l.Tenant != bob {
			t.Errorf("an access line of tenant %q; want the developers alone", l.Tenant)
		}
		if l.Status == http.StatusPaymentRequired {
			refused++
			if l.Tenant != bob {
				t.Errorf("%s was refused 402; only %s has a budget", l.Tenant, bob)
			}
		}
	}
	if refused == 0 {
		t.Errorf("no 402 of %s's budget %s in sluice's access lines", bob, bobBudget)
	}
}

// grepLines is the lines of page that contain s.
func grepLines(page, s string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// postMessages posts a Messages body to base with the header pairs hdr,
// and returns the answer and its body.
func postMessages(t *testing.T, base, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/messages", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", "2023-06-01")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(got)
}

// checkRateLimitPassesThrough: the upstream's 429 reaches the developer
// through sluice and the gateway with its status, body, retry-after and
// x-should-retry. The gateway drops its anthropic-ratelimit-* headers
// (the limits of sluice's upstream key are not the developer's), as it
// does on every answer, and request-id; sluice passes them (proxy's
// TestHeadersPassThroughBothWays). The request is Claude Code's, with its
// bearer token, and the developer tries to pass as another in it: the
// gateway forwards only the headers it allowlists, and names the
// signed-in developer. It comes last: sluice then holds the upstream
// key's requests for the retry-after (RATE_LIMIT_PACING).
func (rig *gatewayRig) checkRateLimitPassesThrough(t *testing.T, email, token string) {
	t.Helper()
	resp, got := postMessages(t, rig.gateway, `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"`+rateLimitMarker+`"}]}`,
		"Authorization", "Bearer "+token,
		"X-Claude-Gateway-User-Email", "bob@example.com", "X-Claude-Gateway-User-Id", "sub-bob", "X-Sluice-Tenant", "bob@example.com")
	for _, r := range rig.arrived.all() {
		if bytes.Contains(r.body, []byte(rateLimitMarker)) && (r.header.Get("X-Claude-Gateway-User-Email") != email || r.header.Get("X-Sluice-Tenant") != "") {
			t.Errorf("a developer's own identity headers passed the gateway: x-claude-gateway-user-email %q, x-sluice-tenant %q; want %s alone",
				r.header.Get("X-Claude-Gateway-User-Email"), r.header.Get("X-Sluice-Tenant"), email)
		}
	}
	if resp.StatusCode != http.StatusTooManyRequests || got != rateLimited.body {
		t.Errorf("the upstream's 429 reached the developer as %s: %s; want 429: %s", resp.Status, got, rateLimited.body)
	}
	for k, v := range rateLimited.headers {
		if strings.HasPrefix(k, "Anthropic-Ratelimit-") {
			v = "" // the gateway's doing
		}
		if resp.Header.Get(k) != v {
			t.Errorf("the upstream's 429 reached the developer with %s %q; want %q", k, resp.Header.Get(k), v)
		}
	}
}

// checkOnlyTheGatewayNamesDevelopers: the gateway answers a bearer it did
// not mint 401 itself; and sluice, which takes the identity headers from
// whoever sends them, refuses whoever is not the gateway: a request
// naming a developer without the gateway's sluice key is answered 401.
func (rig *gatewayRig) checkOnlyTheGatewayNamesDevelopers(t *testing.T) {
	t.Helper()
	const body = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	before := len(rig.arrived.all())
	resp, got := postMessages(t, rig.gateway, body, "Authorization", "Bearer not-a-token-the-gateway-minted")
	if resp.StatusCode != http.StatusUnauthorized || len(rig.arrived.all()) != before {
		t.Errorf("the gateway answered a bearer it did not mint %s %s (%d requests reached sluice); want 401 and none", resp.Status, got, len(rig.arrived.all())-before)
	}
	resp, got = postMessages(t, rig.sluice, body, "X-Api-Key", "sk-ant-a-developers-own-key", "X-Claude-Gateway-User-Email", "ana@example.com")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a request naming a developer without the gateway's key: %s %s; want 401", resp.Status, got)
	}
}
