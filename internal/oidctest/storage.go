package oidctest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage is the provider's in-memory op.Storage: its clients, users,
// pending logins, issued tokens and signing keys. zitadel's op does the
// protocol (discovery, authorize, token, JWKS) and the signing; this only
// holds state.
type storage struct {
	mu       sync.Mutex
	clients  map[string]*client
	users    map[string]User // by subject
	next     User            // who the login page signs in when no login_hint names a user
	logins   map[string]*authRequest
	codes    map[string]string // code -> auth request ID
	refresh  map[string]*authRequest
	keys     []*signingKey // keys[0] signs; all are published
	lifetime time.Duration // of ID and access tokens minted from now on
	audience string        // of client-credentials tokens: the default client's ID
}

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *signingKey) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (k *signingKey) Use() string                                 { return "sig" }
func (k *signingKey) ID() string                                  { return k.id }

// Key is the private key for signing (op.SigningKey) and the public key
// for the JWKS (op.Key): op calls Key on both interfaces, so the JWKS
// wrapper below hands out the public half.
func (k *signingKey) Key() any { return k.key }

type publicKey struct{ *signingKey }

func (k publicKey) Key() any { return &k.key.PublicKey }

func newKey() (*signingKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return &signingKey{id: randomID(), key: k}, nil
}

func randomID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var errNotFound = errors.New("oidctest: not found")

// authRequest is one login in progress, then the grant it became.
type authRequest struct {
	id, clientID, redirectURI, state, nonce, loginHint string
	scopes                                             []string
	responseType                                       oidc.ResponseType
	responseMode                                       oidc.ResponseMode
	challenge                                          *oidc.CodeChallenge
	subject                                            string
	audience                                           []string
	authTime                                           time.Time
	done                                               bool
}

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string                 { return a.audience }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }
func (a *authRequest) SetCurrentScopes(s []string)           { a.scopes = s }

// serviceRequest is a client-credentials grant: the client stands for
// its user.
type serviceRequest struct {
	subject  string
	audience []string
	scopes   []string
}

func (s *serviceRequest) GetSubject() string    { return s.subject }
func (s *serviceRequest) GetAudience() []string { return s.audience }
func (s *serviceRequest) GetScopes() []string   { return s.scopes }

func (s *storage) CreateAuthRequest(_ context.Context, r *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &authRequest{id: randomID(), clientID: r.ClientID, redirectURI: r.RedirectURI, state: r.State,
		nonce: r.Nonce, loginHint: r.LoginHint, scopes: r.Scopes, responseType: r.ResponseType,
		responseMode: r.ResponseMode, audience: []string{r.ClientID}}
	if r.CodeChallenge != "" {
		a.challenge = &oidc.CodeChallenge{Challenge: r.CodeChallenge, Method: r.CodeChallengeMethod}
	}
	s.logins[a.id] = a
	return a, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.logins[id]; ok {
		return a, nil
	}
	return nil, errNotFound
}

func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	id, ok := s.codes[code]
	s.mu.Unlock()
	if !ok {
		return nil, errNotFound
	}
	return s.AuthRequestByID(ctx, id)
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	return nil
}

func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.logins, id)
	for code, rid := range s.codes {
		if rid == id {
			delete(s.codes, code)
		}
	}
	return nil
}

// login marks the auth request id signed in as the user its login_hint
// names (by subject or email), or else as the next user.
func (s *storage) login(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.logins[id]
	if !ok {
		return errNotFound
	}
	u := s.next
	for _, cand := range s.users {
		if a.loginHint != "" && (cand.Subject == a.loginHint || cand.Email == a.loginHint) {
			u = cand
		}
	}
	if u.Subject == "" {
		return errors.New("oidctest: no user to sign in: call SignInAs or pass a login_hint of a known user")
	}
	s.users[u.Subject] = u
	a.subject, a.authTime, a.done = u.Subject, time.Now(), true
	return nil
}

func (s *storage) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return randomID(), time.Now().Add(s.lifetime), nil
}

func (s *storage) CreateAccessAndRefreshTokens(_ context.Context, r op.TokenRequest, _ string) (string, string, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &authRequest{subject: r.GetSubject(), audience: r.GetAudience(), scopes: r.GetScopes(), authTime: time.Now()}
	switch r := r.(type) {
	case *authRequest:
		a.clientID, a.authTime = r.clientID, r.authTime
	}
	refresh := randomID()
	s.refresh[refresh] = a
	return randomID(), refresh, time.Now().Add(s.lifetime), nil
}

func (s *storage) TokenRequestByRefreshToken(_ context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.refresh[token]; ok {
		return a, nil
	}
	return nil, op.ErrInvalidRefreshToken
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) RevokeToken(_ context.Context, token, _, _ string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.refresh, token)
	return nil
}

func (s *storage) GetRefreshTokenInfo(_ context.Context, _, token string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.refresh[token]; ok {
		return a.subject, token, nil
	}
	return "", "", op.ErrInvalidRefreshToken
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[0], nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, len(s.keys))
	for i, k := range s.keys {
		keys[i] = publicKey{k}
	}
	return keys, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	return nil, errNotFound
}

func (s *storage) AuthorizeClientIDSecret(ctx context.Context, id, secret string) error {
	_, err := s.ClientCredentials(ctx, id, secret)
	return err
}

func (s *storage) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok || c.secret != secret {
		return nil, errors.New("oidctest: wrong client ID or secret")
	}
	return c, nil
}

func (s *storage) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok || c.user == "" {
		return nil, errors.New("oidctest: this client stands for no user")
	}
	return &serviceRequest{subject: c.user, audience: []string{s.audience}, scopes: scopes}, nil
}

// claims are the user's claims the tokens carry: email and groups.
func (s *storage) claims(subject string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[subject]
	c := map[string]any{"email": u.Email, "groups": slices.Clone(u.Groups)}
	if u.EmailUnverified {
		c["email_verified"] = false
	}
	return c
}

func (s *storage) SetUserinfoFromScopes(_ context.Context, info *oidc.UserInfo, subject, _ string, _ []string) error {
	c := s.claims(subject)
	info.Subject = subject
	_, unverified := c["email_verified"]
	info.Email, info.EmailVerified = c["email"].(string), oidc.Bool(!unverified)
	if unverified {
		// EmailVerified false is left out of the JSON: say it.
		info.AppendClaims("email_verified", false)
	}
	info.AppendClaims("groups", c["groups"])
	return nil
}

func (s *storage) SetUserinfoFromToken(ctx context.Context, info *oidc.UserInfo, _, subject, _ string) error {
	return s.SetUserinfoFromScopes(ctx, info, subject, "", nil)
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("oidctest: introspection is not served")
}

func (s *storage) GetPrivateClaimsFromScopes(_ context.Context, subject, _ string, _ []string) (map[string]any, error) {
	return s.claims(subject), nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("oidctest: JWT profile is not served")
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errors.New("oidctest: JWT profile is not served")
}

func (s *storage) Health(context.Context) error { return nil }
