package sim

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// foundryPrefix is where a Foundry resource serves Claude:
// https://{resource}.services.ai.azure.com/anthropic/v1/messages.
const foundryPrefix = "/anthropic/"

// handleFoundry serves /anthropic/v1/messages and its count_tokens as
// Claude in Microsoft Foundry does: the Messages API itself (body, SSE,
// Claude's own errors in the API's shape), with the model the request
// names being the deployment's name, behind Azure's authentication (the
// resource's key in api-key or x-api-key, or a Microsoft Entra ID token
// as Authorization: Bearer). Azure's front end answers a refused
// credential in its own error JSON, and a rate limit with retry-after
// but none of the API's anthropic-ratelimit-* headers.
func (s *Server) handleFoundry(w http.ResponseWriter, r *http.Request) {
	if !s.foundryAuthorized(r) {
		writeAzureError(w, http.StatusUnauthorized, "401", "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.")
		return
	}
	t := newTranslated(w, "Request-Id")
	t.wantStream = true // relayed as it is: the API's SSE
	t.relayHeader = foundryHeader
	defer finishFoundry(t)
	body, aerr := readBody(t, r, maxMessagesBody)
	if aerr != nil {
		writeError(t, aerr)
		return
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		writeError(t, errInvalid("request body is not a JSON object"))
		return
	}
	path := "/v1/messages"
	if strings.HasSuffix(r.URL.Path, "/count_tokens") {
		path = "/v1/messages/count_tokens"
	}
	r2 := cloudRequest(r, path, body, "foundry "+foundryCredential(r), r.Header.Values("Anthropic-Beta"))
	if v := r.Header.Get("Anthropic-Version"); v != "" {
		r2.Header.Set("Anthropic-Version", v)
	}
	if path == "/v1/messages" {
		s.handleMessages(t, r2)
		return
	}
	s.handleCountTokens(t, r2)
}

// foundryAuthorized reports whether r carries the configured resource key
// (api-key or x-api-key) or Entra ID token.
func (s *Server) foundryAuthorized(r *http.Request) bool {
	eq := func(got, want string) bool {
		return want != "" && got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
	}
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return eq(tok, s.cfg.FoundryToken)
	}
	return eq(r.Header.Get("Api-Key"), s.cfg.FoundryAPIKey) || eq(r.Header.Get("X-Api-Key"), s.cfg.FoundryAPIKey)
}

// foundryCredential names how r authenticated, for the rate limits' key:
// every key of a resource shares its quota, a token is its own.
func foundryCredential(r *http.Request) string {
	if strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		return "entra"
	}
	return "key"
}

// foundryHeader relays the Messages handler's headers as Azure's front
// end does: the request id and retry-after kept, the API's own
// anthropic-ratelimit-* and organization headers not.
func foundryHeader(dst, src http.Header) {
	for k, v := range src {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "anthropic-") {
			continue
		}
		dst[k] = v
	}
}

// writeAzureError answers in Azure's error JSON.
func writeAzureError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// finishFoundry relays a held error as the API sent it (Foundry passes
// Claude's errors on), with retry-after on a 429.
func finishFoundry(t *translated) {
	if !t.hold {
		return
	}
	t.relayHeader(t.w.Header(), t.h)
	t.w.WriteHeader(t.status)
	_, _ = t.w.Write(t.buf)
}
