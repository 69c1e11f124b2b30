package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/oidcauth"
	"github.com/sluicehq/sluice/request"
)

// Identity-provider tokens (OIDC_ISSUER) beside sluice keys: a credential
// that is no sluice key and has a JWT's shape is checked as a token of
// the provider (package oidcauth), and its holder carries what the
// token's groups give, as a sluice key's holder carries its entry. A
// sluice key is matched first and takes the path it always took.

// looksLikeJWT reports whether cred has a JWT's shape (a JSON header in
// base64url, then two more parts), so that a mistyped sluice key is told
// about sluice keys and a token about tokens.
func looksLikeJWT(cred string) bool {
	return strings.HasPrefix(cred, "eyJ") && strings.Count(cred, ".") == 2
}

// checkToken is the record of the identity-provider token cred and the
// caller it names (the person, across their tokens), or the refusal the
// client gets. Neither holds the token.
func (in *Inbound) checkToken(ctx context.Context, cred string) (*request.Inbound, string, *apierror.Error) {
	rec, err := in.tokens.Check(ctx, cred)
	if err == nil {
		return rec, "oidc:" + rec.Hash, nil
	}
	var e *oidcauth.Error
	if !errors.As(err, &e) {
		e = &oidcauth.Error{Kind: oidcauth.Invalid, Message: "the bearer token could not be checked"}
	}
	switch e.Kind {
	case oidcauth.Forbidden:
		return nil, "", &apierror.Error{Status: http.StatusForbidden, Type: "permission_error", Message: e.Message}
	case oidcauth.Unavailable:
		return nil, "", &apierror.Error{Status: http.StatusServiceUnavailable, Type: "api_error", Message: e.Message}
	}
	return nil, "", &apierror.Error{Status: http.StatusUnauthorized, Type: "authentication_error", Message: e.Message}
}

// holder names who rec is, for a refusal: the sluice key by its name, or
// the person a token named, whose limits their groups set.
func holder(rec *request.Inbound) string {
	if rec.Groups != nil {
		return fmt.Sprintf("%s (by your groups at the identity provider)", rec.Name)
	}
	return fmt.Sprintf("the sluice key %q", rec.Name)
}

// errNoCredential is the answer to a request that brings no credential.
func (in *Inbound) errNoCredential() *apierror.Error {
	if in.tokens == nil {
		return errNoInboundKey
	}
	return errNoToken
}

var errNoToken = &apierror.Error{Status: http.StatusUnauthorized, Type: "authentication_error",
	Message: "this sluice holds the API key itself and takes sign-ins of your organisation's identity provider: send its token as Authorization: Bearer (Claude Code: an apiKeyHelper that prints it, with ANTHROPIC_AUTH_TOKEN unset) or a sluice key in x-api-key; ask whoever runs this sluice how"}
