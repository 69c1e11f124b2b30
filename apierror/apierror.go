// Package apierror is the Anthropic error shape, in one place: the error
// sluice (and its simulator, bulk endpoint and page) answers with, the
// envelope on the wire, writing it with its request id, the in-band SSE
// error event, and reading an error body back (as the bench and the bulk
// submitter do with the upstream's answers).
//
// It imports only the standard library, so every package may use it.
package apierror

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
)

// Error is an error answered in the Anthropic shape.
type Error struct {
	Status     int
	Type       string // error.type: invalid_request_error, rate_limit_error, ...
	Message    string
	RetryAfter int // seconds; 0 means no retry-after header
	// NoRetry sends x-should-retry: false, which the official SDKs obey
	// over the status: an answer no retry can change (a spent budget).
	NoRetry bool
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

// New is an Error without a retry-after.
func New(status int, typ, message string) *Error {
	return &Error{Status: status, Type: typ, Message: message}
}

// Body is the envelope: {"type":"error","error":{"type":...,"message":...},
// "request_id":...}. A batch's errored result and an in-band SSE error carry
// it without a request id.
type Body struct {
	Type      string `json:"type"`
	Error     Detail `json:"error"`
	RequestID string `json:"request_id,omitempty"`
}

// Detail is the envelope's error object.
type Detail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// Envelope is the body of an error of type typ saying message, under id
// ("" for none).
func Envelope(typ, message, id string) Body {
	return Body{Type: "error", Error: Detail{Type: typ, Message: message}, RequestID: id}
}

// Write writes e as a response: the envelope with id as its request_id and
// request-id header (both left out when id is ""), and Retry-After when e
// sets it.
func Write(w http.ResponseWriter, id string, e *Error) {
	data, _ := json.Marshal(Envelope(e.Type, e.Message, id))
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if id != "" {
		h.Set("Request-Id", id)
	}
	h.Set("Content-Length", strconv.Itoa(len(data)))
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.NoRetry {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.Status)
	w.Write(data)
}

// SluiceIDHeader is the response header in which sluice's proxy puts its
// own id for a request before any handler answers, so that an error, its
// request-id header and the access line agree.
const SluiceIDHeader = "X-Sluice-Request-Id"

// WriteSluice writes e as sluice's own answer: under the id in w's
// SluiceIDHeader, or a new one when the proxy set none.
func WriteSluice(w http.ResponseWriter, e *Error) {
	id := w.Header().Get(SluiceIDHeader)
	if id == "" {
		id = NewRequestID()
	}
	Write(w, id, e)
}

// SSE renders an in-band SSE error event, for failures after a stream's
// 200 status has been sent.
func SSE(typ, message string) []byte {
	data, _ := json.Marshal(Envelope(typ, message, ""))
	return fmt.Appendf(nil, "event: error\ndata: %s\n\n", data)
}

// Decode reads an Anthropic error body: ok when b is a JSON object whose
// type is "error" and whose error.type is set. Anything else (not JSON,
// another shape, an empty type) is not one, and the caller says what it got
// instead.
func Decode(b []byte) (Body, bool) {
	var e Body
	if json.Unmarshal(b, &e) != nil || e.Type != "error" || e.Error.Type == "" {
		return Body{}, false
	}
	return e, true
}

// NewRequestID returns an id in the API's style, marked as sluice's own.
func NewRequestID() string { return requestID(rand.Uint64(), rand.Uint32()) }

// requestID is "req_sluice_%016x%08x" of hi and lo, written by hand: one
// allocation, where fmt's boxing of the two numbers made three, on every
// request.
func requestID(hi uint64, lo uint32) string {
	const prefix = "req_sluice_"
	var b [len(prefix) + 16 + 8]byte
	copy(b[:], prefix)
	putHex(b[len(prefix):len(prefix)+16], hi)
	putHex(b[len(prefix)+16:], uint64(lo))
	return string(b[:])
}

// putHex writes v into dst in lower-case hex, zero-padded to dst's length.
func putHex(dst []byte, v uint64) {
	const digits = "0123456789abcdef"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xf]
		v >>= 4
	}
}
