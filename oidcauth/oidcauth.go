// Package oidcauth checks bearer tokens issued by an OpenID Connect
// provider the operator names, and maps a token's claims onto what a
// sluice key carries (request.Inbound): its tenant from one claim (the
// email, say), its models, backends, class, weight and limits from the
// groups another claim lists.
//
// The checking is go-oidc's (github.com/coreos/go-oidc/v3): the issuer,
// the audience, expiry and not-before, and the signature against the
// provider's JWKS, with only the algorithms the provider advertises (never
// "none"). go-oidc keeps the JWKS it fetched and fetches it again when a
// token names a key it does not hold, which is how a rotated key is
// learnt. A token that passes is remembered by its SHA-256 (never the
// token itself) until it expires, so a client that sends the same token
// on every request pays for the signature once.
//
// A provider that cannot be reached does not stop sluice: discovery is
// retried when a token comes, at most every RetryInterval; the keys
// already fetched keep checking tokens they signed, and tokens remembered
// keep passing, each until it expires.
package oidcauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/sluicehq/sluice/request"
)

// Defaults of Options.
const (
	DefaultTenantClaim = "email"
	DefaultGroupsClaim = "groups"
	DefaultCacheSize   = 10_000
	// RetryInterval is how often, at most, a provider whose discovery
	// failed is asked again.
	RetryInterval = 10 * time.Second
	// fetchTimeout bounds one discovery or JWKS fetch.
	fetchTimeout = 5 * time.Second
)

// Options say which provider's tokens are taken, and what they carry.
type Options struct {
	Issuer      string // the provider's issuer URL, as its tokens' iss spells it
	Audience    string // the aud the tokens must carry: the client ID the operator registered
	TenantClaim string // the claim naming the tenant; "" is DefaultTenantClaim
	GroupsClaim string // the claim listing the groups; "" is DefaultGroupsClaim
	// Groups map a group to what its members may do. Empty: every valid
	// token is taken, with sluice's defaults. Not empty: a token whose
	// groups match none of them is refused (Forbidden).
	Groups    []Group
	CacheSize int // tokens remembered at most; 0 is DefaultCacheSize
	// Client fetches discovery and the JWKS; nil: a client of its own.
	Client *http.Client
	// Now is the clock expiry is checked against; nil: time.Now.
	Now func() time.Time
}

// Kind says why a token was refused.
type Kind int

const (
	Invalid     Kind = iota // not a token of this provider for this audience: signature, algorithm, issuer, audience, not-before, claims
	Expired                 // past its exp
	Forbidden               // valid, but its groups are none this sluice maps
	Unavailable             // the provider's keys could not be fetched to check it
)

// Error is a refusal, with a message for the client that says what to
// do. It never holds the token.
type Error struct {
	Kind    Kind
	Message string
}

func (e *Error) Error() string { return e.Message }

// Verifier checks tokens. It is safe for concurrent use.
type Verifier struct {
	o      Options
	ctx    context.Context // carries o.Client to go-oidc
	groups map[string][]*Group

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier // nil until discovery succeeds
	tried    time.Time             // the last failed discovery
	lastErr  error

	cache *cache
}

// New checks o and returns a Verifier; it does not reach the provider
// (Discover does, and Check on the first token).
func New(o Options) (*Verifier, error) {
	u, err := url.Parse(o.Issuer)
	switch {
	case o.Issuer == "":
		return nil, errors.New("no issuer")
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return nil, fmt.Errorf("issuer %q is not an http(s) URL", o.Issuer)
	case o.Audience == "":
		return nil, errors.New("no audience: name the client ID the provider puts in the tokens' aud")
	}
	if o.TenantClaim == "" {
		o.TenantClaim = DefaultTenantClaim
	}
	if o.GroupsClaim == "" {
		o.GroupsClaim = DefaultGroupsClaim
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: fetchTimeout}
	}
	v := &Verifier{o: o, groups: map[string][]*Group{}, cache: newCache(o.CacheSize)}
	for i := range o.Groups {
		g := &o.Groups[i]
		if err := g.check(); err != nil {
			return nil, fmt.Errorf("group %d (%q): %w", i+1, g.Name, err)
		}
		v.groups[g.Name] = append(v.groups[g.Name], g)
	}
	v.ctx = oidc.ClientContext(context.Background(), o.Client)
	return v, nil
}

// Discover fetches the provider's discovery document, once it has not
// been fetched yet. Its error is for the log: Check tries again.
func (v *Verifier) Discover(ctx context.Context) error {
	_, err := v.verifierFor(ctx, true)
	return err
}

// verifierFor is go-oidc's verifier, discovering the provider first if
// need be (now, or if the last failure is RetryInterval old).
func (v *Verifier) verifierFor(ctx context.Context, now bool) (*oidc.IDTokenVerifier, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verifier != nil {
		return v.verifier, nil
	}
	if !now && !v.tried.IsZero() && v.o.Now().Sub(v.tried) < RetryInterval {
		return nil, v.lastErr
	}
	ctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, v.o.Client), fetchTimeout)
	defer cancel()
	p, err := oidc.NewProvider(ctx, v.o.Issuer)
	if err != nil {
		v.tried, v.lastErr = v.o.Now(), fmt.Errorf("the identity provider %s could not be reached for its discovery document: %w", v.o.Issuer, err)
		return nil, v.lastErr
	}
	// The key set lives as long as the Verifier: go-oidc's RemoteKeySet
	// takes its HTTP client from this context, not the request's.
	keys := oidc.NewRemoteKeySet(v.ctx, jwksURL(p))
	algs := supportedAlgs(p)
	v.verifier = oidc.NewVerifier(v.o.Issuer, keys, &oidc.Config{ClientID: v.o.Audience, Now: v.o.Now, SupportedSigningAlgs: algs})
	return v.verifier, nil
}

func jwksURL(p *oidc.Provider) string {
	var c struct {
		JWKS string `json:"jwks_uri"`
	}
	_ = p.Claims(&c)
	return c.JWKS
}

// supportedAlgs are the signing algorithms the provider advertises that
// go-oidc can check; never "none" (go-jose knows no such algorithm, and
// go-oidc refuses a token whose alg is not in the list).
func supportedAlgs(p *oidc.Provider) []string {
	var c struct {
		Algs []string `json:"id_token_signing_alg_values_supported"`
	}
	_ = p.Claims(&c)
	var algs []string
	for _, a := range c.Algs {
		if !strings.EqualFold(a, "none") {
			algs = append(algs, a)
		}
	}
	if len(algs) == 0 {
		algs = []string{oidc.RS256}
	}
	return algs
}

// Check verifies token and returns what its holder may do. A token seen
// before and not yet expired is answered from memory.
func (v *Verifier) Check(ctx context.Context, token string) (*request.Inbound, error) {
	sum := sha256.Sum256([]byte(token))
	now := v.o.Now()
	if rec, ok := v.cache.get(sum, now); ok {
		return rec, nil
	}
	ver, err := v.verifierFor(ctx, false)
	if err != nil {
		return nil, &Error{Kind: Unavailable, Message: "sluice cannot check bearer tokens now: " + err.Error() + "; try again shortly, or tell whoever runs this sluice"}
	}
	idt, err := ver.Verify(ctx, token)
	if err != nil {
		return nil, v.refusal(err, token)
	}
	rec, err := v.inbound(idt)
	if err != nil {
		return nil, err
	}
	v.cache.put(sum, rec, idt.Expiry, now)
	return rec, nil
}

// refusal turns go-oidc's error into a message for the client. go-oidc's
// own text is not passed on: it quotes claims of the token.
func (v *Verifier) refusal(err error, token string) *Error {
	var expired *oidc.TokenExpiredError
	var urlErr *url.Error
	msg := err.Error()
	switch {
	case errors.As(err, &expired):
		return &Error{Kind: Expired, Message: "the bearer token has expired: fetch a fresh one from the identity provider (Claude Code's apiKeyHelper does this)"}
	case errors.As(err, &urlErr) || strings.Contains(msg, "get keys failed") || errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: Unavailable, Message: "sluice cannot check this bearer token now: it is signed by a key sluice does not hold, and the identity provider's keys (JWKS) could not be fetched; try again shortly, or tell whoever runs this sluice"}
	case strings.Contains(msg, "different provider") || otherIssuer(token, v.o.Issuer):
		return &Error{Kind: Invalid, Message: fmt.Sprintf("the bearer token was issued by another identity provider: this sluice takes tokens of %s only (or sluice keys)", v.o.Issuer)}
	case strings.Contains(msg, "expected audience"):
		return &Error{Kind: Invalid, Message: fmt.Sprintf("the bearer token is for another application: this sluice takes tokens whose audience is %q; ask the identity provider for one of that client", v.o.Audience)}
	case strings.Contains(msg, "nbf"):
		return &Error{Kind: Invalid, Message: "the bearer token is not valid yet (its nbf is in the future): check the clocks, or fetch a fresh token"}
	}
	return &Error{Kind: Invalid, Message: "the bearer token is not a valid token of this sluice's identity provider (malformed, an algorithm it does not sign with, or a bad signature): fetch a fresh one from " + v.o.Issuer}
}

// otherIssuer reports whether token, unverified, names an issuer other
// than issuer. go-oidc checks the signature before the issuer, so a token
// of another provider fails on its key; this is only to say why.
func otherIssuer(token, issuer string) bool {
	t, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA})
	if err != nil {
		return false
	}
	var c jwt.Claims
	return t.UnsafeClaimsWithoutVerification(&c) == nil && c.Issuer != "" && c.Issuer != issuer
}

// inbound maps a verified token's claims onto what a sluice key carries.
func (v *Verifier) inbound(idt *oidc.IDToken) (*request.Inbound, error) {
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return nil, &Error{Kind: Invalid, Message: "the bearer token's claims are not a JSON object"}
	}
	tenant, _ := claims[v.o.TenantClaim].(string)
	if tenant == "" {
		return nil, &Error{Kind: Invalid, Message: fmt.Sprintf("the bearer token carries no %q claim, which this sluice names each caller by: ask the identity provider to include it (for OpenID Connect's email, the email scope), or whoever runs sluice to set OIDC_TENANT_CLAIM", v.o.TenantClaim)}
	}
	if v.o.TenantClaim == "email" {
		if verified, ok := claims["email_verified"].(bool); ok && !verified {
			// An address the user typed and the provider never proved:
			// naming a tenant by it would let anyone be anyone.
			return nil, &Error{Kind: Invalid, Message: "the bearer token's email is not verified by the identity provider (email_verified is false), and this sluice names each caller by their email: verify the address with the provider, or ask whoever runs sluice to name callers by another claim (OIDC_TENANT_CLAIM)"}
		}
		// One person, one tenant, however the provider or the user
		// capitalises the address (Alice@Example.com is alice@example.com):
		// their budgets and fair share are theirs whichever way it came.
		tenant = strings.ToLower(tenant)
	}
	groups := stringsOf(claims[v.o.GroupsClaim]) // never nil: nil is a sluice key's
	rec := &request.Inbound{Name: tenant, Tenant: tenant, Groups: groups, Hash: subjectHash(idt.Issuer, idt.Subject)}
	if len(v.groups) == 0 {
		return rec, nil
	}
	matched := v.groups["*"]
	for _, g := range groups {
		matched = append(matched, v.groups[g]...)
	}
	if len(matched) == 0 {
		return nil, &Error{Kind: Forbidden, Message: fmt.Sprintf("%s signed in, but is in none of the groups this sluice lets in (%s): ask whoever runs the identity provider to add you to one", tenant, strings.Join(v.groupNames(), ", "))}
	}
	merge(rec, matched)
	return rec, nil
}

// stringsOf is a groups claim as a list: an array of strings, or one
// string (some providers send a single group so); empty, not nil, when
// there is none.
func stringsOf(c any) []string {
	out := []string{}
	switch c := c.(type) {
	case string:
		out = append(out, c)
	case []any:
		for _, e := range c {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// subjectHash names the signed-in person as a sluice key's Hash does a
// key: 16 hex digits, the same for every token of the same subject, so
// budgets and spend by key follow the person across tokens.
func subjectHash(issuer, subject string) string {
	sum := sha256.Sum256([]byte(issuer + "\x00" + subject))
	return hex.EncodeToString(sum[:8])
}
