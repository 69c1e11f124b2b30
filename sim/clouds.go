package sim

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// The clouds' paths. The simulator serves Claude as Amazon Bedrock,
// Google Vertex AI and Microsoft Foundry do, by translating each cloud's request into its own
// Messages handling and the answer back into the cloud's framing and
// errors: the same models of latency, capacity, caching, rate limits and
// faults, behind each cloud's wire protocol and authentication.
const (
	backendAnthropic = "anthropic"
	backendBedrock   = "bedrock"
	backendVertex    = "vertex"
	backendFoundry   = "foundry"

	vertexPrefix = "/v1/projects/"
)

// cloudAPIVersions are the API versions Bedrock and Vertex AI take in
// the body's anthropic_version beside each cloud's own dated one: the
// official SDKs since their 1.x (npm @anthropic-ai/bedrock-sdk and
// vertex-sdk 1.0.0, "add support for new API version 2026-10-21"; Go
// anthropic-sdk-go/v2's bedrock and vertex options) copy the
// anthropic-version header they send, 2026-10-21, into the body; the 0.x
// SDKs sent the clouds' own versions.
var cloudAPIVersions = map[string]bool{"2026-10-21": true}

// cloudAPIVersionList names cloudAPIVersions in a message.
const cloudAPIVersionList = "2026-10-21"

// backendOf names the API a request path belongs to, for the stats.
func backendOf(path string) string {
	switch {
	case strings.HasPrefix(path, "/model/"):
		return backendBedrock
	case strings.HasPrefix(path, vertexPrefix):
		return backendVertex
	case strings.HasPrefix(path, foundryPrefix):
		return backendFoundry
	}
	return backendAnthropic
}

// translated is a ResponseWriter that a cloud's handler gives to the
// Messages handlers: they write the API's answer to it, and it decides,
// at the status, whether to relay it (a reply), reframe it (a stream) or
// hold it to rewrite at finish (an error, or a body the cloud shapes
// otherwise).
type translated struct {
	w      http.ResponseWriter
	h      http.Header // what the Messages handler sees and sets
	status int
	hold   bool   // the body is kept in buf for finish
	buf    []byte // held body, or SSE not yet reframed
	// stream reframes one complete SSE event (name, data) onto w.
	stream func(name string, data []byte) error
	// streamType, when set, replaces the stream's Content-Type.
	streamType string
	// wantStream is whether a 2xx event stream is reframed (else relayed).
	wantStream bool
	// holdOK holds a 2xx non-stream body too (for a cloud that shapes it).
	holdOK bool
	// relayHeader copies the Messages handler's headers onto w's, the
	// cloud's way, before w's status is written.
	relayHeader func(dst, src http.Header)
}

func (t *translated) Header() http.Header { return t.h }

func (t *translated) WriteHeader(code int) {
	if t.status != 0 {
		return
	}
	t.status = code
	isStream := strings.HasPrefix(t.h.Get("Content-Type"), "text/event-stream")
	switch {
	case code >= 400, code < 300 && !isStream && t.holdOK:
		t.hold = true
		return
	case isStream && t.wantStream:
		t.relayHeader(t.w.Header(), t.h)
		t.w.Header().Del("Content-Length")
		if t.streamType != "" {
			t.w.Header().Set("Content-Type", t.streamType)
		}
		t.w.WriteHeader(code)
		return
	}
	t.relayHeader(t.w.Header(), t.h)
	t.w.WriteHeader(code)
}

func (t *translated) Write(p []byte) (int, error) {
	if t.status == 0 {
		t.WriteHeader(http.StatusOK)
	}
	switch {
	case t.hold:
		t.buf = append(t.buf, p...)
		return len(p), nil
	case t.stream != nil && t.wantStream && strings.HasPrefix(t.h.Get("Content-Type"), "text/event-stream"):
		t.buf = append(t.buf, p...)
		for {
			i := bytes.Index(t.buf, []byte("\n\n"))
			if i < 0 {
				return len(p), nil
			}
			name, data := parseSSE(t.buf[:i])
			if err := t.stream(name, data); err != nil {
				return 0, err
			}
			t.buf = t.buf[:copy(t.buf, t.buf[i+2:])]
		}
	}
	return t.w.Write(p)
}

// Flush flushes what was reframed; ResponseController finds it first.
func (t *translated) Flush() { _ = http.NewResponseController(t.w).Flush() }

// Unwrap lets ResponseController reach the connection (the reset fault).
func (t *translated) Unwrap() http.ResponseWriter { return t.w }

// parseSSE splits one event into its name and data (lines joined by \n).
func parseSSE(ev []byte) (name string, data []byte) {
	for _, line := range bytes.Split(ev, []byte("\n")) {
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			name = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, line[len("data: "):]...)
		}
	}
	return name, data
}

// cloudHeader copies the Messages handler's headers but the API's own:
// a cloud sends no anthropic-ratelimit-* or organization headers, and
// names the request id its own way (idHeader).
func cloudHeader(idHeader string) func(dst, src http.Header) {
	return func(dst, src http.Header) {
		for k, v := range src {
			lk := strings.ToLower(k)
			switch {
			case lk == "request-id":
				dst[http.CanonicalHeaderKey(idHeader)] = v
			case strings.HasPrefix(lk, "anthropic-"), lk == "retry-after", lk == "retry-after-ms":
			default:
				dst[k] = v
			}
		}
	}
}

// newTranslated wraps w for a cloud handler. ServeHTTP has already put
// the API's request-id and organization headers on w; they move into the
// handler's view, and go out the cloud's way.
func newTranslated(w http.ResponseWriter, idHeader string) *translated {
	t := &translated{w: w, h: w.Header().Clone(), relayHeader: cloudHeader(idHeader)}
	for k := range w.Header() {
		if lk := strings.ToLower(k); lk == "request-id" || strings.HasPrefix(lk, "anthropic-") {
			w.Header().Del(k)
		}
	}
	w.Header().Set(idHeader, t.h.Get("request-id"))
	return t
}

// cloudRequest is r rewritten into the Messages request the simulator's
// own handlers take: body, the key its rate limits count by, and the
// client's x-sim-* test headers kept.
func cloudRequest(r *http.Request, path string, body []byte, key string, betas []string) *http.Request {
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = path, ""
	r2.Header = http.Header{}
	for k, v := range r.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-sim-") {
			r2.Header[k] = v
		}
	}
	r2.Header.Set("X-Api-Key", key)
	r2.Header.Set("Content-Type", "application/json")
	if len(betas) > 0 {
		r2.Header.Set("Anthropic-Beta", strings.Join(betas, ","))
	}
	r2.Body = http.NoBody
	if len(body) > 0 {
		r2.Body = io.NopCloser(bytes.NewReader(body))
	}
	r2.ContentLength = int64(len(body))
	return r2
}
