package sim

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/apierror"
)

// vertexVersion is Vertex AI's own anthropic_version for the body; the
// body may name the API version instead (cloudAPIVersions).
const vertexVersion = "vertex-2023-10-16"

// handleVertex serves rawPredict, streamRawPredict and
// count-tokens:rawPredict for Anthropic's models. A reply and its SSE
// stream are the API's; rate limits and overload answer as Google's front
// end does, in google.rpc.Status JSON; Claude's own refusals (a bad
// request) keep the API's shape, as Vertex relays them.
func (s *Server) handleVertex(w http.ResponseWriter, r *http.Request) {
	model, method, ok := strings.Cut(r.PathValue("op"), ":")
	if !ok {
		writeGoogleError(w, http.StatusNotFound, "NOT_FOUND", "The requested URL "+r.URL.Path+" was not found: want models/{model}:rawPredict, :streamRawPredict or count-tokens:rawPredict.")
		return
	}
	tok, hasTok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if s.cfg.VertexToken == "" || !hasTok || subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.VertexToken)) != 1 {
		writeGoogleError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
		return
	}
	count := model == "count-tokens" && method == "rawPredict"
	stream := method == "streamRawPredict"
	if !count && !stream && method != "rawPredict" {
		writeGoogleError(w, http.StatusNotFound, "NOT_FOUND", "method "+method+" is not served for publishers/anthropic models")
		return
	}
	t := newTranslated(w, "Request-Id")
	t.wantStream = stream // relayed as it is: Vertex streams the API's SSE
	defer finishVertex(t)

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
	var version string
	_ = json.Unmarshal(fields["anthropic_version"], &version)
	if version != vertexVersion && !cloudAPIVersions[version] {
		writeError(t, errInvalid("anthropic_version: must be "+vertexVersion+" or "+cloudAPIVersionList+" on Vertex AI"))
		return
	}
	delete(fields, "anthropic_version")
	if !count {
		if _, ok := fields["model"]; ok {
			writeError(t, errInvalid("model: not permitted in the body on Vertex AI; the model is in the URL"))
			return
		}
		fields["model"], _ = json.Marshal(strings.Replace(model, "@", "-", 1))
	} else {
		var m string
		_ = json.Unmarshal(fields["model"], &m)
		fields["model"], _ = json.Marshal(strings.Replace(m, "@", "-", 1))
	}
	msgs, _ := json.Marshal(fields)
	betas := r.Header.Values("Anthropic-Beta")
	key := "vertex " + r.PathValue("project")
	if count {
		s.handleCountTokens(t, cloudRequest(r, "/v1/messages/count_tokens", msgs, key, betas))
		return
	}
	s.handleMessages(t, cloudRequest(r, "/v1/messages", msgs, key, betas))
}

// googleCodes is the google.rpc.Code name of each HTTP status Vertex's
// front end answers with.
var googleCodes = map[int]string{
	http.StatusTooManyRequests:     "RESOURCE_EXHAUSTED",
	http.StatusServiceUnavailable:  "UNAVAILABLE",
	http.StatusInternalServerError: "INTERNAL",
	http.StatusGatewayTimeout:      "DEADLINE_EXCEEDED",
}

// writeGoogleError answers in google.rpc.Status JSON.
func writeGoogleError(w http.ResponseWriter, status int, code, msg string) {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": msg, "status": code}})
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// finishVertex rewrites a held error: the front end's (a rate limit, an
// overload, an internal error) in Google's shape, Claude's own as the API
// sent it.
func finishVertex(t *translated) {
	if !t.hold {
		return
	}
	e, _ := apierror.Decode(t.buf)
	status := t.status
	if status == 529 || e.Error.Type == "overloaded_error" {
		status = http.StatusServiceUnavailable
	}
	if code, ok := googleCodes[status]; ok {
		writeGoogleError(t.w, status, code, e.Error.Message)
		return
	}
	t.relayHeader(t.w.Header(), t.h)
	t.w.WriteHeader(t.status)
	_, _ = t.w.Write(t.buf)
}
