package apierror

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// What Write puts on the wire, Decode reads back: status, headers, type,
// message (quotes, newlines and non-ASCII included) and id.
func TestWriteDecodeRoundTrip(t *testing.T) {
	for _, e := range []*Error{
		New(http.StatusBadRequest, "invalid_request_error", `max_tokens: "0" < 1`+"\nlower it; ünïcode ✓"),
		{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Message: "wait", RetryAfter: 7},
		New(529, "overloaded_error", ""),
	} {
		w := httptest.NewRecorder()
		Write(w, "req_abc", e)
		if w.Code != e.Status {
			t.Errorf("%v: status %d; want %d", e, w.Code, e.Status)
		}
		h := w.Result().Header
		if h.Get("Content-Type") != "application/json" || h.Get("Request-Id") != "req_abc" ||
			h.Get("Content-Length") != strconv.Itoa(w.Body.Len()) {
			t.Errorf("%v: headers %v", e, h)
		}
		if got, want := h.Get("Retry-After"), map[bool]string{true: strconv.Itoa(e.RetryAfter)}[e.RetryAfter > 0]; got != want {
			t.Errorf("%v: Retry-After %q; want %q", e, got, want)
		}
		b, ok := Decode(w.Body.Bytes())
		if !ok {
			t.Fatalf("%v: Decode(%s) refused what Write wrote", e, w.Body)
		}
		if want := Envelope(e.Type, e.Message, "req_abc"); b != want {
			t.Errorf("%v: decoded %+v; want %+v", e, b, want)
		}
	}
}

// Without an id, neither the body nor the headers carry one (the page's
// errors, a batch's errored result); WriteSluice always gives one: the
// proxy's, or a new one of sluice's own.
func TestIDs(t *testing.T) {
	w := httptest.NewRecorder()
	Write(w, "", New(404, "not_found_error", "no"))
	if strings.Contains(w.Body.String(), "request_id") || w.Header().Get("Request-Id") != "" {
		t.Errorf("no id: body %s, request-id %q; want neither", w.Body, w.Header().Get("Request-Id"))
	}

	w = httptest.NewRecorder()
	w.Header().Set(SluiceIDHeader, "req_sluice_given")
	WriteSluice(w, New(500, "api_error", "x"))
	if b, _ := Decode(w.Body.Bytes()); b.RequestID != "req_sluice_given" || w.Header().Get("Request-Id") != "req_sluice_given" {
		t.Errorf("proxy's id: body %s, request-id %q; want req_sluice_given in both", w.Body, w.Header().Get("Request-Id"))
	}

	w = httptest.NewRecorder()
	WriteSluice(w, New(500, "api_error", "x"))
	b, _ := Decode(w.Body.Bytes())
	if !strings.HasPrefix(b.RequestID, "req_sluice_") || w.Header().Get("Request-Id") != b.RequestID {
		t.Errorf("no proxy id: body %s, request-id %q; want one new req_sluice_ id in both", w.Body, w.Header().Get("Request-Id"))
	}
}

func TestSSE(t *testing.T) {
	got := string(SSE("overloaded_error", `cut "here"`))
	want := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"cut \\\"here\\\"\"}}\n\n"
	if got != want {
		t.Fatalf("SSE = %q; want %q", got, want)
	}
	data := strings.TrimSuffix(strings.TrimPrefix(got, "event: error\ndata: "), "\n\n")
	if b, ok := Decode([]byte(data)); !ok || b.Error.Type != "overloaded_error" || b.Error.Message != `cut "here"` {
		t.Errorf("Decode(SSE data) = %+v, %v", b, ok)
	}
}

// Decode says "not an Anthropic error" for whatever else a server or a
// proxy in between may send, and never fails otherwise.
func TestDecodeHostileBodies(t *testing.T) {
	huge := bytes.Repeat([]byte("x"), 8<<20)
	for name, body := range map[string][]byte{
		"empty":             nil,
		"html":              []byte("<html><body>502 Bad Gateway</body></html>"),
		"plain text":        []byte("upstream connect error or disconnect/reset before headers"),
		"truncated":         []byte(`{"type":"error","error":{"type":"api_error","mess`),
		"array":             []byte(`[{"type":"error","error":{"type":"api_error"}}]`),
		"null":              []byte("null"),
		"string":            []byte(`"error"`),
		"other type":        []byte(`{"type":"message","error":{"type":"api_error","message":"m"}}`),
		"no type":           []byte(`{"error":{"type":"api_error","message":"m"}}`),
		"error is a string": []byte(`{"type":"error","error":"api_error"}`),
		"error type number": []byte(`{"type":"error","error":{"type":529,"message":"m"}}`),
		"empty error type":  []byte(`{"type":"error","error":{"type":"","message":"m"}}`),
		"no error":          []byte(`{"type":"error"}`),
		"OpenAI's shape":    []byte(`{"error":{"message":"m","type":"server_error","code":null}}`),
		"huge garbage":      huge,
		"deeply nested":     append(bytes.Repeat([]byte("["), 100000), bytes.Repeat([]byte("]"), 100000)...),
		"nested in error":   []byte(`{"type":"error","error":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`),
	} {
		if b, ok := Decode(body); ok || b != (Body{}) {
			t.Errorf("%s: Decode = %+v, %v; want not an error body", name, b, ok)
		}
	}

	// encoding/json replaces invalid UTF-8 with U+FFFD: a type is set, so
	// it is an error body.
	if b, ok := Decode([]byte("{\"type\":\"error\",\"error\":{\"type\":\"\xff\xfe\"}}")); !ok || b.Error.Type != "\ufffd\ufffd" {
		t.Errorf("invalid UTF-8 in the type: Decode = %+v, %v", b, ok)
	}

	// A huge but well-formed error body is one: its message whole, unknown
	// fields ignored.
	msg := strings.Repeat("m", 8<<20)
	body := fmt.Sprintf(`{"type":"error","extra":[1,2,{"a":null}],"error":{"type":"api_error","message":%q,"details":{}},"request_id":"req_1"}`, msg)
	if b, ok := Decode([]byte(body)); !ok || b.Error.Type != "api_error" || b.Error.Message != msg || b.RequestID != "req_1" {
		t.Errorf("huge error body: type %q, message of %d bytes, id %q, ok %v", b.Error.Type, len(b.Error.Message), b.RequestID, ok)
	}
}

// The envelope's field names and order are the API's.
func TestEnvelopeJSON(t *testing.T) {
	data, err := json.Marshal(Envelope("api_error", "m", "req_1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"error","error":{"type":"api_error","message":"m"},"request_id":"req_1"}`; string(data) != want {
		t.Errorf("envelope %s; want %s", data, want)
	}
}

// The hand-written request id is fmt's "req_sluice_%016x%08x" to the
// letter, zero padding included.
func TestRequestIDIsFmts(t *testing.T) {
	for _, v := range []struct {
		hi uint64
		lo uint32
	}{{0, 0}, {1, 1}, {0xdeadbeef, 0xabc}, {math.MaxUint64, math.MaxUint32}, {0x0123456789abcdef, 0x89abcdef}} {
		if got, want := requestID(v.hi, v.lo), fmt.Sprintf("req_sluice_%016x%08x", v.hi, v.lo); got != want {
			t.Errorf("requestID(%#x, %#x) = %q; want %q", v.hi, v.lo, got, want)
		}
	}
	if a, b := NewRequestID(), NewRequestID(); a == b || len(a) != len("req_sluice_")+24 {
		t.Errorf("two ids %q, %q: want distinct, of 35 bytes", a, b)
	}
}

func TestNewRequestIDAllocatesOnce(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = NewRequestID() }); n > 1 {
		t.Errorf("NewRequestID allocates %v times; want 1", n)
	}
}
