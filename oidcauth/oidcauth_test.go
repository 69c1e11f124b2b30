package oidcauth

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/oidctest"
	"github.com/sluicehq/sluice/request"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	alice = oidctest.User{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"eng", "ml"}}
	bob   = oidctest.User{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"sales"}}
)

// clock is the verifier's clock: the real time, moved on by tests.
type clock struct{ ahead atomic.Int64 }

func (c *clock) now() time.Time         { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *clock) skip(d time.Duration)   { c.ahead.Add(int64(d)) }
func (c *clock) opts(o Options) Options { o.Now = c.now; return o }

// newVerifier is a Verifier of p's tokens for oidctest's default client,
// with o's other options, on a transport closed when t ends.
func newVerifier(t *testing.T, p *oidctest.Provider, o Options) *Verifier {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	if o.Issuer == "" {
		o.Issuer = p.Issuer()
	}
	if o.Audience == "" {
		o.Audience = oidctest.ClientID
	}
	o.Client = &http.Client{Transport: tr, Timeout: 5 * time.Second}
	v, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// refused asserts that err is a refusal of kind k whose message holds want.
func refused(t *testing.T, err error, k Kind, want string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want a refusal of kind %d", err, k)
	}
	if e.Kind != k || !strings.Contains(e.Message, want) {
		t.Fatalf("got kind %d %q, want kind %d saying %q", e.Kind, e.Message, k, want)
	}
}

func TestATokenMapsToTenantAndGroups(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{})
	first, second := p.Token(t, alice), p.Token(t, alice)
	rec, err := v.Check(t.Context(), first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Tenant != alice.Email || rec.Name != alice.Email || strings.Join(rec.Groups, ",") != "eng,ml" || len(rec.Hash) != 16 {
		t.Fatalf("record %+v", rec)
	}
	// The access token (a JWT of the same provider and audience) is taken
	// too, and names the same person the same way.
	rec2, err := v.Check(t.Context(), second.Access)
	if err != nil {
		t.Fatal(err)
	}
	if rec2.Hash != rec.Hash {
		t.Errorf("two tokens of one subject hash apart: %s, %s", rec.Hash, rec2.Hash)
	}
	if rb, err := v.Check(t.Context(), p.Token(t, bob).ID); err != nil || rb.Hash == rec.Hash {
		t.Errorf("bob: %+v, %v", rb, err)
	}
}

func TestServiceAccountAccessToken(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{})
	id, secret := p.ServiceAccount(bob)
	tok := fetchServiceToken(t, p, id, secret)
	rec, err := v.Check(t.Context(), tok)
	if err != nil || rec.Tenant != bob.Email {
		t.Fatalf("%+v, %v", rec, err)
	}
}

func TestRotationFetchesTheNewKey(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{})
	old := p.Token(t, alice).ID
	if _, err := v.Check(t.Context(), old); err != nil {
		t.Fatal(err)
	}
	if err := p.RotateKey(true); err != nil { // the old key is withdrawn
		t.Fatal(err)
	}
	if _, err := v.Check(t.Context(), p.Token(t, alice).ID); err != nil {
		t.Fatalf("a token of the rotated key: %v", err)
	}
	// The old token was checked while its key was published: remembered,
	// it passes for its life.
	if _, err := v.Check(t.Context(), old); err != nil {
		t.Fatalf("a token checked before its key was withdrawn: %v", err)
	}
	// A sluice that never saw it finds no key for it.
	fresh := newVerifier(t, p, Options{})
	_, err := fresh.Check(t.Context(), old)
	refused(t, err, Invalid, "not a valid token")
}

func TestExpiredToken(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{})
	p.SetLifetime(-time.Minute)
	_, err := v.Check(t.Context(), p.Token(t, alice).ID)
	refused(t, err, Expired, "fetch a fresh one")
}

// One person is one tenant however their address is capitalised (a
// hostile run got a fresh budget by signing in as Alice@example.com), and
// an address the provider never verified names no one.
func TestEmailNamesOneTenant(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{})
	rec, err := v.Check(t.Context(), p.Token(t, oidctest.User{Subject: "u-alice", Email: "Alice@Example.com", Groups: alice.Groups}).ID)
	if err != nil || rec.Tenant != "alice@example.com" {
		t.Errorf("Alice@Example.com: %+v, %v; want tenant alice@example.com", rec, err)
	}
	_, err = v.Check(t.Context(), p.Token(t, oidctest.User{Subject: "u-mallory", Email: "ceo@example.com", EmailUnverified: true}).ID)
	refused(t, err, Invalid, "not verified")
}

func TestARememberedTokenExpires(t *testing.T) {
	p := oidctest.Start(t)
	var c clock
	v := newVerifier(t, p, c.opts(Options{}))
	p.SetLifetime(10 * time.Minute)
	tok := p.Token(t, alice).ID
	if _, err := v.Check(t.Context(), tok); err != nil {
		t.Fatal(err)
	}
	c.skip(11 * time.Minute)
	_, err := v.Check(t.Context(), tok)
	refused(t, err, Expired, "has expired")
}

func TestAnotherIssuerOrAudience(t *testing.T) {
	p, other := oidctest.Start(t), oidctest.Start(t)
	v := newVerifier(t, p, Options{})
	_, err := v.Check(t.Context(), other.Token(t, alice).ID)
	refused(t, err, Invalid, "another identity provider")

	elsewhere := newVerifier(t, p, Options{Audience: "another-app"})
	_, err = elsewhere.Check(t.Context(), p.Token(t, alice).ID)
	refused(t, err, Invalid, `audience is "another-app"`)
}

// An unsigned token ("alg": "none") with claims that would otherwise
// pass is refused, as is a token whose signature is another's.
func TestAlgNoneAndForgedSignature(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{})
	good := p.Token(t, alice).ID
	parts := strings.Split(good, ".")
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + "."
	_, err := v.Check(t.Context(), none)
	refused(t, err, Invalid, "not a valid token")

	// alice's claims under bob's token's signature.
	forged := parts[0] + "." + parts[1] + "." + strings.Split(p.Token(t, bob).ID, ".")[2]
	_, err = v.Check(t.Context(), forged)
	refused(t, err, Invalid, "not a valid token")

	for _, junk := range []string{"", "x", "a.b.c", strings.Repeat("eyJ.", 1000)} {
		_, err = v.Check(t.Context(), junk)
		refused(t, err, Invalid, "not a valid token")
	}
}

// A provider that goes down: the keys already fetched keep checking the
// tokens they signed, and remembered tokens pass, each for its life; a
// token of a key sluice never fetched cannot be checked (Unavailable);
// past their expiry tokens are refused as expired.
func TestProviderDown(t *testing.T) {
	p := oidctest.Start(t)
	var c clock
	v := newVerifier(t, p, c.opts(Options{}))
	p.SetLifetime(10 * time.Minute)
	seen, unseen := p.Token(t, alice).ID, p.Token(t, bob).ID
	if _, err := v.Check(t.Context(), seen); err != nil {
		t.Fatal(err)
	}
	if err := p.RotateKey(false); err != nil {
		t.Fatal(err)
	}
	rotated := p.Token(t, alice).ID
	p.Down()
	if _, err := v.Check(t.Context(), seen); err != nil {
		t.Fatalf("a remembered token, provider down: %v", err)
	}
	if _, err := v.Check(t.Context(), unseen); err != nil {
		t.Fatalf("a token of a key fetched before, provider down: %v", err)
	}
	_, err := v.Check(t.Context(), rotated)
	refused(t, err, Unavailable, "could not be fetched")
	c.skip(11 * time.Minute)
	_, err = v.Check(t.Context(), seen)
	refused(t, err, Expired, "has expired")
	_, err = v.Check(t.Context(), unseen)
	refused(t, err, Expired, "has expired")
	p.Up()
	p.SetLifetime(time.Hour)
	if _, err := v.Check(t.Context(), p.Token(t, alice).ID); err != nil {
		t.Fatalf("back up: %v", err)
	}
}

// A provider down when sluice starts: Discover fails, tokens are answered
// Unavailable, discovery is asked again only every RetryInterval, and
// once the provider is back tokens pass.
func TestProviderDownAtStart(t *testing.T) {
	p := oidctest.Start(t)
	tok := p.Token(t, alice).ID
	p.Down()
	var c clock
	v := newVerifier(t, p, c.opts(Options{}))
	if err := v.Discover(t.Context()); err == nil {
		t.Fatal("discovery of a provider that is down succeeded")
	}
	_, err := v.Check(t.Context(), tok)
	refused(t, err, Unavailable, "could not be reached")
	p.Up()
	_, err = v.Check(t.Context(), tok)
	refused(t, err, Unavailable, "could not be reached") // within RetryInterval of the failure
	c.skip(RetryInterval)
	if _, err := v.Check(t.Context(), tok); err != nil {
		t.Fatalf("after the retry interval, provider up: %v", err)
	}
}

func TestGroupsMapToWhatAKeyCarries(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{Groups: []Group{
		{Name: "eng", Models: []string{"claude-sonnet-*"}, Backends: []string{"anthropic"}, Class: request.ClassBatch, Weight: 2, MaxConcurrent: 4, MaxWaiting: 10},
		{Name: "ml", Models: []string{"claude-opus-*"}, Backends: []string{"bedrock"}, Class: request.ClassInteractive, Weight: 1, MaxConcurrent: 8},
		{Name: "contractors", Models: []string{"claude-haiku-*"}, MaxConcurrent: 1},
	}})
	rec, err := v.Check(t.Context(), p.Token(t, alice).ID) // eng and ml
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rec.Models, ",") != "claude-sonnet-*,claude-opus-*" || strings.Join(rec.Backends, ",") != "anthropic,bedrock" ||
		rec.Class != request.ClassInteractive || rec.Weight != 2 || rec.MaxConcurrent != 8 || rec.MaxWaiting != 0 {
		t.Errorf("alice in eng and ml: %+v", rec)
	}
	_, err = v.Check(t.Context(), p.Token(t, bob).ID) // sales: not mapped
	refused(t, err, Forbidden, "none of the groups this sluice lets in (contractors, eng, ml)")

	everyone := newVerifier(t, p, Options{Groups: []Group{{Name: "*", Models: []string{"claude-haiku-*"}}}})
	rec, err = everyone.Check(t.Context(), p.Token(t, bob).ID)
	if err != nil || strings.Join(rec.Models, ",") != "claude-haiku-*" {
		t.Errorf("bob under *: %+v, %v", rec, err)
	}
}

// A token without a groups claim has no groups, but Groups is not nil:
// nil is a sluice key's.
func TestNoGroupsClaim(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{GroupsClaim: "roles"})
	rec, err := v.Check(t.Context(), p.Token(t, alice).ID)
	if err != nil || rec.Groups == nil || len(rec.Groups) != 0 {
		t.Fatalf("%+v, %v", rec, err)
	}
}

func TestTenantClaimMissing(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{TenantClaim: "upn"})
	_, err := v.Check(t.Context(), p.Token(t, alice).ID)
	refused(t, err, Invalid, `no "upn" claim`)
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{
		{},
		{Issuer: "ftp://idp", Audience: "a"},
		{Issuer: "https://idp.example.com"},
		{Issuer: "https://idp.example.com", Audience: "a", Groups: []Group{{Name: ""}}},
		{Issuer: "https://idp.example.com", Audience: "a", Groups: []Group{{Name: "g", Weight: -1}}},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestCacheIsBounded(t *testing.T) {
	p := oidctest.Start(t)
	v := newVerifier(t, p, Options{CacheSize: 8})
	for range 20 {
		if _, err := v.Check(t.Context(), p.Token(t, alice).ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := v.cache.len(); n > 8 {
		t.Fatalf("the cache holds %d tokens, over its size of 8", n)
	}
}
