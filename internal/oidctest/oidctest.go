// Package oidctest runs a real OpenID Connect provider for tests:
// zitadel's op (github.com/zitadel/oidc/v3/pkg/op, a maintained Go
// implementation that serves discovery, authorize, token and JWKS and does
// the signing) over an in-memory storage, on a loopback httptest server.
// It signs users in without a login page (the login step picks the user
// and goes straight on), so a test can drive the authorization-code flow
// as a browser would, mint ID and access tokens carrying email and groups
// claims, rotate the signing key, and take the provider down and back up.
//
// Tokens are RS256 JWTs. An ID token's audience is the client that asked
// (ClientID for Token); a client-credentials access token's audience is
// ClientID.
package oidctest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/pkg/op"
)

// The default client, registered on Start: the application whose ID is
// the audience of the tokens Token and ServiceAccount mint.
const (
	ClientID     = "sluice"
	ClientSecret = "sluice-test-secret"
)

// User is someone the provider can sign in.
type User struct {
	Subject string   // the sub claim
	Email   string   // the email claim
	Groups  []string // the groups claim
	// EmailUnverified makes the tokens say email_verified: false (an
	// address the provider let the user type without proving it).
	EmailUnverified bool
}

// Tokens are what the token endpoint gave for one sign-in.
type Tokens struct {
	ID, Access, Refresh string
	Expiry              time.Time // of the access token, as expires_in says
}

// Provider is a running OpenID Connect provider.
type Provider struct {
	srv  *httptest.Server
	op   *op.Provider
	s    *storage
	down atomic.Bool
	// callback is the default client's redirect URI, served here.
	callback string
}

// Start starts a provider on a loopback port, stopped when t ends. Its
// tokens live an hour until SetLifetime says otherwise.
func Start(t testing.TB) *Provider {
	t.Helper()
	p, err := start()
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	t.Cleanup(p.srv.Close)
	return p
}

func start() (*Provider, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	p := &Provider{srv: httptest.NewUnstartedServer(nil)}
	issuer := "http://" + p.srv.Listener.Addr().String()
	p.callback = issuer + "/client/callback"
	p.s = &storage{clients: map[string]*client{}, users: map[string]User{}, logins: map[string]*authRequest{},
		codes: map[string]string{}, refresh: map[string]*authRequest{}, keys: []*signingKey{key},
		lifetime: time.Hour, audience: ClientID}
	var crypto [32]byte
	_, _ = rand.Read(crypto[:])
	p.op, err = op.NewProvider(&op.Config{CryptoKey: crypto, CodeMethodS256: true, AuthMethodPost: true, GrantTypeRefreshToken: true},
		p.s, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		return nil, err
	}
	p.AddClient(ClientID, ClientSecret, p.callback)
	mux := http.NewServeMux()
	mux.HandleFunc("/login", func(w http.ResponseWriter, r *http.Request) {
		id := r.FormValue("id")
		if err := p.s.login(id); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		http.Redirect(w, r, issuer+p.op.AuthorizationEndpoint().Relative()+"/callback?id="+url.QueryEscape(id), http.StatusFound)
	})
	mux.HandleFunc("/client/callback", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "signed in") })
	mux.Handle("/", p.op)
	p.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.down.Load() {
			panic(http.ErrAbortHandler) // the connection drops, as with a provider that is down
		}
		mux.ServeHTTP(w, r)
	})
	p.srv.Start()
	return p, nil
}

// Issuer is the provider's issuer URL (its discovery document is at
// Issuer()+"/.well-known/openid-configuration").
func (p *Provider) Issuer() string { return p.srv.URL }

// AddClient registers an application that signs users in through the
// authorization-code flow (client_secret_basic or _post) and may use the
// refresh-token grant.
func (p *Provider) AddClient(id, secret string, redirectURIs ...string) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.clients[id] = &client{id: id, secret: secret, redirectURIs: redirectURIs, s: p.s,
		loginURL: func(req string) string { return p.srv.URL + "/login?id=" + url.QueryEscape(req) }}
}

// ServiceAccount registers a client standing for u: its
// client-credentials grant (POST Issuer()+"/oauth/token" with
// grant_type=client_credentials, id and secret by HTTP Basic) gives an
// access token JWT for u's subject, email and groups, with audience
// ClientID. It is how a script (an apiKeyHelper) gets a token with curl.
func (p *Provider) ServiceAccount(u User) (id, secret string) {
	id, secret = "sa-"+randomID(), randomID()
	p.AddClient(id, secret)
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.users[u.Subject] = u
	p.s.clients[id].user = u.Subject
	return id, secret
}

// SignInAs makes u the user the next logins sign in as (a login whose
// login_hint names a known user signs that user in instead).
func (p *Provider) SignInAs(u User) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.users[u.Subject], p.s.next = u, u
}

// SetLifetime sets the lifetime of the ID and access tokens minted from
// now on; a negative one mints tokens already expired.
func (p *Provider) SetLifetime(d time.Duration) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	p.s.lifetime = d
}

// RotateKey makes a new signing key sign from now on. The old keys stay
// in the JWKS, as providers keep them while tokens they signed live,
// unless retire: then only the new key is published.
func (p *Provider) RotateKey(retire bool) error {
	k, err := newKey()
	if err != nil {
		return err
	}
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if retire {
		p.s.keys = p.s.keys[:0]
	}
	p.s.keys = append([]*signingKey{k}, p.s.keys...)
	return nil
}

// KeyID is the ID (kid) of the key that signs now.
func (p *Provider) KeyID() string {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.s.keys[0].id
}

// Down makes the provider drop every request, as one that is down; Up
// brings it back.
func (p *Provider) Down() { p.down.Store(true) }

// Up brings back a provider taken down.
func (p *Provider) Up() { p.down.Store(false) }

// LogIn does in a browser's place what a user does after an application
// sent them to authorizeURL (the provider's authorize endpoint with the
// application's client_id, redirect_uri, state...): it follows the
// provider's redirects, signing u in, and returns the URL it was sent back
// to on the application (its redirect_uri with code and state), without
// requesting it.
func (p *Provider) LogIn(ctx context.Context, u User, authorizeURL string) (*url.URL, error) {
	p.SignInAs(u)
	var back *url.URL
	c := &http.Client{CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if r.URL.Host != p.srv.Listener.Addr().String() {
			back = r.URL
			return http.ErrUseLastResponse
		}
		if len(via) > 10 {
			return errors.New("oidctest: too many redirects")
		}
		return nil
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authorizeURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if back == nil && strings.HasPrefix(resp.Request.URL.String(), p.callback) {
		back = resp.Request.URL
	}
	if back == nil {
		return nil, fmt.Errorf("oidctest: the login ended at %s with %s, not back on the application", resp.Request.URL, resp.Status)
	}
	if e := back.Query().Get("error"); e != "" {
		return nil, fmt.Errorf("oidctest: the provider refused the login: %s: %s", e, back.Query().Get("error_description"))
	}
	return back, nil
}

// Token signs u in to the default client through the authorization-code
// flow and returns the tokens: an ID token (audience ClientID) and an
// access token, each carrying u's email and groups.
func (p *Provider) Token(t testing.TB, u User) Tokens {
	t.Helper()
	tok, err := p.token(t.Context(), u)
	if err != nil {
		t.Fatalf("oidctest: %v", err)
	}
	return tok
}

func (p *Provider) token(ctx context.Context, u User) (Tokens, error) {
	authorize := p.Issuer() + p.op.AuthorizationEndpoint().Relative() + "?" + url.Values{
		"client_id": {ClientID}, "response_type": {"code"}, "scope": {"openid email groups offline_access"},
		"redirect_uri": {p.callback}, "state": {randomID()}, "nonce": {randomID()}}.Encode()
	back, err := p.LogIn(ctx, u, authorize)
	if err != nil {
		return Tokens{}, err
	}
	return p.exchange(ctx, url.Values{"grant_type": {"authorization_code"}, "code": {back.Query().Get("code")}, "redirect_uri": {p.callback}})
}

// exchange posts form to the token endpoint as the default client.
func (p *Provider) exchange(ctx context.Context, form url.Values) (Tokens, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Issuer()+p.op.TokenEndpoint().Relative(), strings.NewReader(form.Encode()))
	if err != nil {
		return Tokens{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(ClientID, ClientSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Tokens{}, err
	}
	defer resp.Body.Close()
	var body struct {
		ID        string `json:"id_token"`
		Access    string `json:"access_token"`
		Refresh   string `json:"refresh_token"`
		ExpiresIn uint64 `json:"expires_in"` // zitadel writes a negative lifetime as its uint64 wrap
		Error     string `json:"error"`
		Desc      string `json:"error_description"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return Tokens{}, fmt.Errorf("token endpoint: %s: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		return Tokens{}, fmt.Errorf("token endpoint: %s: %s: %s", resp.Status, body.Error, body.Desc)
	}
	return Tokens{ID: body.ID, Access: body.Access, Refresh: body.Refresh, Expiry: time.Now().Add(time.Duration(int64(body.ExpiresIn)) * time.Second)}, nil
}
