package proxy

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
)

// apiError is an error sluice answers on its own, in the Anthropic shape.
type apiError struct {
	Status     int
	Type       string
	Message    string
	RetryAfter int // seconds; 0 means no retry-after header
}

func (e *apiError) Error() string { return e.Type + ": " + e.Message }

// errorBody is the Anthropic error envelope.
type errorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

// newRequestID returns an id in the API's style, marked as sluice's own.
func newRequestID() string { return requestID(rand.Uint64(), rand.Uint32()) }

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

// writeError writes e as an Anthropic-shaped error response.
func writeError(w http.ResponseWriter, e *apiError) {
	// sluice's own id for this request, set by ServeHTTP, so the error, its
	// header and the access line agree.
	id := w.Header().Get(sluiceIDHeader)
	if id == "" {
		id = newRequestID()
	}
	var b errorBody
	b.Type = "error"
	b.Error.Type = e.Type
	b.Error.Message = e.Message
	b.RequestID = id
	data, _ := json.Marshal(b)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Request-Id", id)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	w.Write(data)
}

// sseError renders an in-band SSE error event, for failures after a stream's
// 200 status has been sent.
func sseError(errType, message string) []byte {
	var b struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	b.Type = "error"
	b.Error.Type = errType
	b.Error.Message = message
	data, _ := json.Marshal(b)
	return fmt.Appendf(nil, "event: error\ndata: %s\n\n", data)
}

func errMethod(allow string) *apiError {
	return &apiError{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error",
		Message: fmt.Sprintf("method not allowed on this path; use %s", allow)}
}

func errTooLarge(limit int64) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Type: "request_too_large",
		Message: fmt.Sprintf("request body exceeds the %d MB limit for this endpoint; send a smaller request (for bulk work, split it or use the Message Batches API)", limit>>20)}
}

func errBadJSON(detail string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Message: "the request body must be a JSON object with model, max_tokens and messages: " + detail}
}
