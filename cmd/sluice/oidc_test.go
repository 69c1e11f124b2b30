package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/oidctest"
	"github.com/sluicehq/sluice/sim"
)

// sluice serve with OIDC_ISSUER, in front of the simulator, with a real
// identity provider that is down when sluice starts: sluice starts
// anyway (a warning), sluice keys work, tokens are answered 503 until the
// provider is back; then a developer's token is served as the tenant its
// email names, under its group's model list and its tenant's budget; an
// expired token is told to fetch a fresh one; and no token is in any
// answer or log line.
func TestServeTakesIdentityProviderTokens(t *testing.T) {
	idp := oidctest.Start(t)
	alice := oidctest.User{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"eng"}}
	tok := idp.Token(t, alice)
	idp.SetLifetime(-time.Minute)
	expired := idp.Token(t, alice).ID
	idp.Down()

	s := sim.New(sim.Config{Seed: 1})
	up := httptest.NewServer(s)
	defer func() { up.Close(); s.Close() }()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.json")
	os.WriteFile(keys, []byte(keysFile(map[string]string{"bob": bobKey})), 0o600)
	conf := filepath.Join(dir, "sluice.toml")
	os.WriteFile(conf, []byte(fmt.Sprintf(`OIDC_ISSUER = %q
OIDC_AUDIENCE = %q

[[oidc_groups]]
group = "eng"
models = ["claude-sonnet-*"]

[[budgets]]
tenant = "alice@example.com"
tokens = 1
period = "day"
`, idp.Issuer(), oidctest.ClientID)), 0o600)
	t.Setenv("ANTHROPIC_API_KEY", e2eHeldKey)
	logs := logFile{filepath.Join(dir, "stderr")}
	f, err := os.Create(logs.path)
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = f
	defer func() { os.Stderr = stderr; f.Close() }()
	served := make(chan error, 1)
	go func() {
		served <- runServe([]string{"--config", conf, "--listen", "127.0.0.1:0", "--upstream", up.URL,
			"--batch-enabled", "1", "--log-format", "json", "--inbound-keys-file", keys})
	}()
	api := "http://" + logs.addrOf(t, "sluice listening")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	var seen strings.Builder
	call := func(model, how, cred string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", api+"/v1/messages", strings.NewReader(`{"model":"`+model+`","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		if how == "bearer" {
			req.Header.Set("Authorization", "Bearer "+cred)
		} else {
			req.Header.Set("X-Api-Key", cred)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(&seen, "%d %v %s\n", resp.StatusCode, resp.Header, b)
		return resp.StatusCode, string(b)
	}
	const sonnet, haiku = "claude-sonnet-4-5", "claude-haiku-4-5"

	if !strings.Contains(logs.text(t), "the identity provider cannot be reached now") {
		t.Errorf("no warning that the provider is down at start:\n%s", logs.text(t))
	}
	if status, body := call(sonnet, "x-api-key", bobKey); status != 200 {
		t.Errorf("a sluice key, provider down: %d %s", status, body)
	}
	if status, body := call(sonnet, "bearer", tok.ID); status != 503 || !strings.Contains(body, "could not be reached") {
		t.Errorf("a token, provider down at start: %d %s", status, body)
	}
	idp.Up()
	// Discovery is asked again at most every oidcauth.RetryInterval (10 s).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		status, body := call(sonnet, "bearer", tok.ID)
		if status == 200 {
			break
		}
		if status != 503 || time.Now().After(deadline) {
			t.Fatalf("a token, provider back: %d %s", status, body)
		}
	}
	if status, body := call(haiku, "bearer", tok.ID); status != 403 || !strings.Contains(body, "claude-sonnet-*") {
		t.Errorf("a model outside the group's list: %d %s", status, body)
	}
	if status, body := call(sonnet, "bearer", expired); status != 401 || !strings.Contains(body, "has expired: fetch a fresh one") {
		t.Errorf("an expired token: %d %s", status, body)
	}
	// alice's tenant budget (1 token a day) is spent by her first answer.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		status, body := call(sonnet, "bearer", tok.Access)
		if status == http.StatusPaymentRequired {
			break
		}
		if status != 200 || time.Now().After(deadline) {
			t.Fatalf("alice past her budget: %d %s", status, body)
		}
	}
	if status, _ := call(sonnet, "x-api-key", bobKey); status != 200 {
		t.Errorf("bob, whose tenant has no budget: %d", status)
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	if err := <-served; err != nil {
		t.Fatalf("sluice serve: %v", err)
	}
	all := seen.String() + logs.text(t)
	if !strings.Contains(all, `"tenant":"alice@example.com"`) {
		t.Errorf("no access line names alice's tenant:\n%s", logs.text(t))
	}
	for _, secret := range []string{tok.ID, tok.Access, expired, e2eHeldKey, bobKey} {
		if strings.Contains(all, secret) || strings.Contains(all, secret[strings.LastIndexByte(secret, '.')+1:]) {
			t.Errorf("a secret appears in an answer or the log: %.12q…", secret)
		}
	}
}
