package oidctest

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var alice = User{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"eng", "ml"}}

type claims struct {
	Email  string   `json:"email"`
	Groups []string `json:"groups"`
}

// verify checks tok with go-oidc against p's discovery and JWKS.
func verify(t *testing.T, p *Provider, tok string) (*oidc.IDToken, error) {
	t.Helper()
	ctx := oidc.ClientContext(t.Context(), &http.Client{Transport: &http.Transport{}})
	prov, err := oidc.NewProvider(ctx, p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	return prov.Verifier(&oidc.Config{ClientID: ClientID}).Verify(ctx, tok)
}

func TestTokenCarriesClaimsAndVerifies(t *testing.T) {
	p := Start(t)
	tok := p.Token(t, alice)
	for name, raw := range map[string]string{"id": tok.ID, "access": tok.Access} {
		idt, err := verify(t, p, raw)
		if err != nil {
			t.Fatalf("%s token: %v", name, err)
		}
		var c claims
		if err := idt.Claims(&c); err != nil {
			t.Fatal(err)
		}
		if idt.Subject != alice.Subject || c.Email != alice.Email || strings.Join(c.Groups, ",") != "eng,ml" {
			t.Errorf("%s token: sub %q, claims %+v", name, idt.Subject, c)
		}
	}
	if tok.Refresh == "" {
		t.Error("no refresh token for offline_access")
	}
}

func TestRotateAndExpiry(t *testing.T) {
	p := Start(t)
	old := p.KeyID()
	if err := p.RotateKey(false); err != nil {
		t.Fatal(err)
	}
	if p.KeyID() == old {
		t.Fatal("the key did not change")
	}
	if _, err := verify(t, p, p.Token(t, alice).ID); err != nil {
		t.Fatalf("a token of the new key: %v", err)
	}
	p.SetLifetime(-time.Minute)
	if _, err := verify(t, p, p.Token(t, alice).ID); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("a token minted with a negative lifetime: %v, want expired", err)
	}
}

func TestServiceAccountByCurlShapedRequest(t *testing.T) {
	p := Start(t)
	id, secret := p.ServiceAccount(alice)
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
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: %v", resp.Status, err)
	}
	idt, err := verify(t, p, body.Access)
	if err != nil {
		t.Fatal(err)
	}
	var c claims
	_ = idt.Claims(&c)
	if idt.Subject != alice.Subject || c.Email != alice.Email {
		t.Errorf("sub %q claims %+v", idt.Subject, c)
	}
}

func TestDownDropsRequests(t *testing.T) {
	p := Start(t)
	p.Down()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	if resp, err := (&http.Client{Transport: tr}).Get(p.Issuer() + "/.well-known/openid-configuration"); err == nil {
		resp.Body.Close()
		t.Fatalf("a provider that is down answered %s", resp.Status)
	}
	p.Up()
	resp, err := (&http.Client{Transport: tr}).Get(p.Issuer() + "/.well-known/openid-configuration")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("back up: %v", err)
	}
	resp.Body.Close()
}
