package proxy

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/oidctest"
	"github.com/sluicehq/sluice/oidcauth"
	recording "github.com/sluicehq/sluice/record"
	"github.com/sluicehq/sluice/request"
)

var (
	tokenAlice = oidctest.User{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"eng"}}
	tokenBob   = oidctest.User{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"sales"}}
)

// tokenGroups are the fixture's [[oidc_groups]]: eng may call Sonnet only,
// as batch work of weight 3, two calls at once a person.
var tokenGroups = []oidcauth.Group{{Name: "eng", Models: []string{"claude-sonnet-*"}, Class: request.ClassBatch, Weight: 3, MaxConcurrent: 2}}

// startTokens is startInbound with identity-provider tokens of a real
// provider beside the sluice keys of entries (no keys file if none).
func startTokens(t *testing.T, entries ...string) (*inboundFixture, *oidctest.Provider) {
	t.Helper()
	return startTokensWith(t, Options{}, entries...)
}

// startTokensWith is startTokens with opt's recorder.
func startTokensWith(t *testing.T, opt Options, entries ...string) (*inboundFixture, *oidctest.Provider) {
	t.Helper()
	return startTokensFor(t, tokenGroups, testConfig(t, "", true), opt, entries...)
}

// startTokensFor is startTokensWith with the [[oidc_groups]] groups and
// the settings of cfg (its upstream made the simulator). With budgets in
// cfg the windowed path's admission chain is sluice's own, and f.descs
// sees nothing.
func startTokensFor(t *testing.T, groups []oidcauth.Group, cfg config.Config, opt Options, entries ...string) (*inboundFixture, *oidctest.Provider) {
	t.Helper()
	idp := oidctest.Start(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	v, err := oidcauth.New(oidcauth.Options{Issuer: idp.Issuer(), Audience: oidctest.ClientID, Groups: groups,
		Client: &http.Client{Transport: tr, Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	f := &inboundFixture{sim: startSim(t), descs: &descriptors{}, logs: &bytes.Buffer{}}
	if len(entries) > 0 {
		f.keys = filepath.Join(t.TempDir(), "keys.json")
		writeKeys(t, f.keys, entries...)
	}
	if f.in, err = LoadInbound(InboundOptions{KeysFile: f.keys, UpstreamKey: heldKey, Tokens: v}); err != nil {
		t.Fatal(err)
	}
	var srv *testServer
	up, err := url.Parse(simURL(f.sim))
	if err != nil {
		t.Fatal(err)
	}
	cfg.UpstreamURL = up
	parts := assemble.Parts{Admission: f.descs}
	if cfg.Budgets != nil { // the real admission chain, whose first check is the budgets'
		parts = assemble.Parts{}
	}
	f.p, srv = startProxyWith(t, cfg, Options{Inbound: f.in, Parts: parts, Recorder: opt.Recorder,
		Logger: slog.New(slog.NewJSONHandler(lockedWriter{w: f.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	f.url = srv.URL
	return f, idp
}

// A token holder's requests reach the upstream with the held key only,
// carrying what the token's groups give: tenant, groups, class, weight,
// limits and models.
func TestTokenReachesTheUpstreamAsTheHeldKeyWithItsGroups(t *testing.T) {
	f, idp := startTokens(t, keyEntry("alice", ""))
	tok := idp.Token(t, tokenAlice)
	for _, cred := range []string{tok.ID, tok.Access} {
		if status, body := send(t, "POST", f.url+"/v1/messages", requestJSON, "bearer", cred); status != http.StatusOK {
			t.Fatalf("a valid token: %d %s", status, body)
		}
	}
	creds := f.sim.Stats().Credentials
	if held := "x-api-key " + request.Tenant(http.Header{"X-Api-Key": {heldKey}}); len(creds) != 1 || creds[held] != 2 {
		t.Errorf("the upstream saw credentials %v; want only the held key, twice", creds)
	}
	d := f.descs.last()
	if d.Inbound == nil || d.Inbound.Tenant != tokenAlice.Email || strings.Join(d.Inbound.Groups, ",") != "eng" ||
		d.Inbound.Class != request.ClassBatch || d.Inbound.Weight != 3 || d.Inbound.MaxConcurrent != 2 || len(d.Inbound.Hash) != 16 {
		t.Errorf("descriptor's Inbound = %+v", d.Inbound)
	}
	// The group's model list binds, as a sluice key's does.
	haiku := strings.Replace(requestJSON, "claude-sonnet-4-5", "claude-haiku-4-5", 1)
	if status, body := send(t, "POST", f.url+"/v1/messages", haiku, "bearer", tok.ID); status != http.StatusForbidden || errorType(t, body) != "permission_error" ||
		!strings.Contains(body, "alice@example.com (by your groups at the identity provider) may not call model") {
		t.Errorf("a model the group may not call: %d %s", status, body)
	}
	// A sluice key beside tokens takes its path as before.
	if status, body := send(t, "POST", f.url+"/v1/messages", requestJSON, "x-api-key", sluiceKey("alice")); status != http.StatusOK {
		t.Errorf("a sluice key beside tokens: %d %s", status, body)
	}
	if d := f.descs.last(); d.Inbound == nil || d.Inbound.Name != "alice" || d.Inbound.Groups != nil {
		t.Errorf("the sluice key's Inbound = %+v", d.Inbound)
	}
}

// Every refusal is Anthropic-shaped, with the status that fits and a
// message that says what to do; none reaches the upstream.
func TestTokenRefusals(t *testing.T) {
	f, idp := startTokens(t) // tokens only: no keys file
	good := idp.Token(t, tokenAlice).ID
	parts := strings.Split(good, ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + parts[1] + "."
	other := oidctest.Start(t).Token(t, tokenAlice).ID
	unmapped := idp.Token(t, tokenBob).ID
	idp.SetLifetime(-time.Minute)
	expired := idp.Token(t, tokenAlice).ID
	for _, tc := range []struct {
		name, how, cred string
		status          int
		typ, says       string
	}{
		{"no credential", "", "", 401, "authentication_error", "identity provider"},
		{"a sluice key that is not", "x-api-key", sluiceKey("mallory"), 401, "authentication_error", "sluice key"},
		{"expired", "bearer", expired, 401, "authentication_error", "has expired: fetch a fresh one"},
		{"another issuer", "bearer", other, 401, "authentication_error", "another identity provider"},
		{"alg none", "bearer", none, 401, "authentication_error", "not a valid token"},
		{"a group not let in", "bearer", unmapped, 403, "permission_error", "none of the groups this sluice lets in (eng)"},
	} {
		status, body := send(t, "POST", f.url+"/v1/messages", requestJSON, tc.how, tc.cred)
		if status != tc.status || errorType(t, body) != tc.typ || !strings.Contains(body, tc.says) {
			t.Errorf("%s: %d %s; want %d %s saying %q", tc.name, status, body, tc.status, tc.typ, tc.says)
		}
	}
	// The provider down, a key sluice never fetched: 503, try again.
	idp.SetLifetime(time.Hour)
	if err := idp.RotateKey(true); err != nil {
		t.Fatal(err)
	}
	rotated := idp.Token(t, tokenAlice).ID
	idp.Down()
	if status, body := send(t, "POST", f.url+"/v1/messages", requestJSON, "bearer", rotated); status != http.StatusServiceUnavailable || !strings.Contains(body, "try again") {
		t.Errorf("provider down, new key: %d %s", status, body)
	}
	if status, body := send(t, "POST", f.url+"/v1/messages", requestJSON, "bearer", good); status != http.StatusOK {
		t.Errorf("provider down, a token of a key held: %d %s", status, body)
	}
	if n := f.sim.Stats().Requests; n != 1 {
		t.Errorf("%d requests reached the upstream; want the one good one", n)
	}
}

// No token, good or refused, is in an answer, a log line, a metric or a
// recording (RECORD_FILE).
func TestTokensLeakNowhere(t *testing.T) {
	recPath := filepath.Join(t.TempDir(), "rec.jsonl")
	rc, err := recording.Open(recording.Config{Path: recPath, MaxBytes: 1 << 20, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	f, idp := startTokensWith(t, Options{Recorder: rc}, keyEntry("alice", ""))
	good, bob := idp.Token(t, tokenAlice), idp.Token(t, tokenBob).ID
	idp.SetLifetime(-time.Minute)
	expired := idp.Token(t, tokenAlice).ID
	var seen strings.Builder
	var logged []string
	tokens := []string{good.ID, good.Access, bob, expired, good.ID + "x"}
	for _, tok := range tokens {
		for _, path := range []string{"/v1/messages", "/v1/models"} {
			method := "POST"
			if path == "/v1/models" {
				method = "GET"
			}
			resp := sendRaw(t, method, f.url+path, requestJSON, "bearer", tok)
			fmt.Fprintf(&seen, "%d %v %s\n", resp.StatusCode, resp.Header, readAll(t, resp.Body))
			resp.Body.Close()
			logged = append(logged, resp.Header.Get(sluiceIDHeader))
		}
	}
	resp := sendRaw(t, "GET", f.url+"/metrics", "", "", "")
	fmt.Fprintf(&seen, "%s", readAll(t, resp.Body))
	resp.Body.Close()
	fmt.Fprintf(&seen, "%s", waitLogged(t, func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return f.logs.String()
	}, logged...))
	rc.Close() // every answer above is logged, and so recorded
	rec, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&seen, "%s", rec)
	if !strings.Contains(seen.String(), `"msg":"request"`) || !strings.Contains(seen.String(), "sluice_requests_total") || !strings.Contains(string(rec), `"model"`) {
		t.Fatal("the test saw no access line, no metrics or no recorded request: it would prove nothing")
	}
	for _, tok := range tokens {
		// A JWT's signature is what makes it a credential; its header
		// and claims alone are public.
		sig := tok[strings.LastIndexByte(tok, '.')+1:]
		if strings.Contains(seen.String(), tok) || strings.Contains(seen.String(), sig) {
			t.Errorf("a token appears in an answer, a log line or a metric")
		}
	}
	if strings.Contains(seen.String(), heldKey) {
		t.Error("the held key appears")
	}
}

// benchInboundToken is identity-provider tokens of a real provider (no
// keys file), and a token of it for the requests to carry.
func benchInboundToken(b *testing.B) (Options, string) {
	idp := oidctest.Start(b)
	tr := &http.Transport{}
	b.Cleanup(tr.CloseIdleConnections)
	v, err := oidcauth.New(oidcauth.Options{Issuer: idp.Issuer(), Audience: oidctest.ClientID, Groups: tokenGroups,
		Client: &http.Client{Transport: tr, Timeout: 5 * time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	in, err := LoadInbound(InboundOptions{UpstreamKey: "sk-ant-held-bench", Tokens: v})
	if err != nil {
		b.Fatal(err)
	}
	return Options{Inbound: in}, idp.Token(b, tokenAlice).ID
}
