// Package cloudwire is what the cloud backends (bedrock, vertex, foundry) share: the
// reading of a client's Messages request into the fields a cloud wants
// changed, and the building of the answers the Anthropic API would give,
// so that sluice's relay sees no difference between a cloud and the API.
package cloudwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/upstream"
)

// Request is a client's Messages body opened for rewriting. Fields keeps
// every member but the ones the cloud takes elsewhere as the client sent
// it, byte for byte: cache_control and anything a later API version adds
// pass through without this package knowing of them.
type Request struct {
	Model  string
	Stream bool
	Fields map[string]json.RawMessage
}

// ParseMessages opens body, a JSON object. It fails with an Anthropic
// 400 when the body is not an object or model is not a string.
func ParseMessages(body []byte) (*Request, *apierror.Error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, apierror.New(http.StatusBadRequest, "invalid_request_error", "request body is not a JSON object; send a Messages request")
	}
	r := &Request{Fields: fields}
	if m, ok := fields["model"]; ok {
		if err := json.Unmarshal(m, &r.Model); err != nil {
			return nil, apierror.New(http.StatusBadRequest, "invalid_request_error", "model: must be a string")
		}
	}
	if strings.TrimSpace(r.Model) == "" {
		return nil, apierror.New(http.StatusBadRequest, "invalid_request_error", "model: field required; name a model such as claude-sonnet-4-5")
	}
	if s, ok := fields["stream"]; ok {
		_ = json.Unmarshal(s, &r.Stream) // a non-bool stream is the cloud's to refuse
	}
	return r, nil
}

// Set puts v, marshalled, under key.
func (r *Request) Set(key string, v any) {
	b, _ := json.Marshal(v) // strings, bools and string slices only
	r.Fields[key] = b
}

// Body is the rewritten JSON body. encoding/json writes a RawMessage as
// the client sent it, compacted: every value, cache_control included,
// stays what it was.
func (r *Request) Body() ([]byte, error) {
	return json.Marshal(r.Fields)
}

// Betas is the client's anthropic-beta header as a list: each header line
// split on commas, blanks dropped, in order.
func Betas(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			if b = strings.TrimSpace(b); b != "" {
				out = append(out, b)
			}
		}
	}
	return out
}

// Answer is the response the Anthropic API would give with status and a
// JSON body, under requestID ("" for none), to in.
func Answer(in *http.Request, status int, body []byte, requestID string) *http.Response {
	h := http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(body))}}
	if requestID != "" {
		h.Set("Request-Id", requestID)
	}
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + statusText(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       in,
	}
}

// ErrorAnswer is e as the Anthropic API's error response.
func ErrorAnswer(in *http.Request, e *apierror.Error, requestID string) *http.Response {
	body, _ := json.Marshal(apierror.Envelope(e.Type, e.Message, requestID))
	resp := Answer(in, e.Status, body, requestID)
	if e.RetryAfter > 0 {
		resp.Header.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	return resp
}

func statusText(code int) string {
	if code == 529 {
		return "Overloaded"
	}
	return http.StatusText(code)
}

// ByStatus is the Anthropic status and error type for a cloud's error
// that names no type this package knows: its HTTP status, with a 503 as
// the API's overload (529), and anything else not an error status as a
// bad gateway.
func ByStatus(status int) (int, string) {
	switch {
	case status == http.StatusServiceUnavailable:
		return 529, "overloaded_error"
	case status >= 400 && status < 600:
		return status, typeForStatus(status)
	}
	return http.StatusBadGateway, "api_error"
}

// typeForStatus is the Anthropic error type the API answers with status.
func typeForStatus(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == 529, status == http.StatusServiceUnavailable:
		return "overloaded_error"
	case status == http.StatusGatewayTimeout, status == http.StatusRequestTimeout:
		return "timeout_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	}
	return "api_error"
}

// ErrorBodyLimit bounds how much of a cloud's error body is read: enough
// for any error JSON, not a stream by mistake.
const ErrorBodyLimit = 64 << 10

// ReadErrorBody reads and closes an error response's body, up to
// ErrorBodyLimit.
func ReadErrorBody(resp *http.Response) []byte {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, ErrorBodyLimit))
	resp.Body.Close()
	return b
}

// SSEEvent appends one server-sent event, as the API frames it.
func SSEEvent(dst []byte, name string, data []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	// The API's event JSON holds no raw newline; a data line per payload
	// line keeps the framing valid should one ever come.
	for _, line := range bytes.Split(data, []byte("\n")) {
		dst = append(dst, "\ndata: "...)
		dst = append(dst, line...)
	}
	return append(dst, "\n\n"...)
}

// Models is defaults with over laid on top: an entry of over adds or
// replaces a mapping, and an empty value removes the default's.
func Models(defaults, over map[string]string) map[string]string {
	out := make(map[string]string, len(defaults)+len(over))
	for k, v := range defaults {
		out[k] = v
	}
	for k, v := range over {
		if v == "" {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

// Route is which Messages operation a client's request asks for.
type Route int

const (
	RouteOther  Route = iota // not served by a cloud backend
	RouteCreate              // POST /v1/messages
	RouteCount               // POST /v1/messages/count_tokens
	RouteBatch               // anything under /v1/messages/batches
)

// RouteOf names in's operation.
func RouteOf(in *http.Request) Route {
	p := strings.TrimSuffix(in.URL.Path, "/")
	switch {
	case p == "/v1/messages/batches" || strings.HasPrefix(p, "/v1/messages/batches/"):
		return RouteBatch
	case in.Method == http.MethodPost && p == "/v1/messages":
		return RouteCreate
	case in.Method == http.MethodPost && p == "/v1/messages/count_tokens":
		return RouteCount
	}
	return RouteOther
}

// Backend is what both cloud backends are: a kind and a name to say in
// messages, a model table, an endpoint and the client that reaches it.
type Backend struct {
	Kind   string // bedrock, vertex, foundry
	Name   string // the backend's name in configuration; may be empty
	Models map[string]string
	Base   *url.URL
	HTTP   *http.Client
}

// NewBackend parses endpoint (scheme://host[/prefix]), lays models over
// defaults, and gives a client of its own when hc is nil.
func NewBackend(kind, name, endpoint string, defaults, models map[string]string, hc *http.Client) (Backend, error) {
	base, err := url.Parse(strings.TrimSuffix(endpoint, "/"))
	if err != nil || base.Scheme == "" || base.Host == "" {
		return Backend{}, fmt.Errorf("%s: endpoint %q: want scheme://host[/prefix]", kind, endpoint)
	}
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 100
		hc = &http.Client{Transport: t}
	}
	return Backend{Kind: kind, Name: name, Models: Models(defaults, models), Base: base, HTTP: hc}, nil
}

// ModelIDs are the first-party ids the model table maps, sorted.
func (b *Backend) ModelIDs() []string {
	ids := make([]string, 0, len(b.Models))
	for id := range b.Models {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Label names the backend in messages: bedrock backend "east".
func (b *Backend) Label() string {
	if b.Name == "" {
		return b.Kind + " backend"
	}
	return b.Kind + " backend " + strconv.Quote(b.Name)
}

// Origin is the endpoint's scheme://host, as an *upstream.Error names it.
func (b *Backend) Origin() string { return b.Base.Scheme + "://" + b.Base.Host }

// URL is the endpoint with path (and its escaped form) appended.
func (b *Backend) URL(path, rawPath string) string {
	u := *b.Base
	u.Path = b.Base.Path + path
	u.RawPath = b.Base.EscapedPath() + rawPath
	return u.String()
}

// Open reads in, a client's request, for a cloud: the operation, the
// opened body and the cloud's id for its model. When the backend answers
// it itself (an endpoint it does not serve, a body that is not a Messages
// request, a model it has no mapping for) answer is set and nothing is to
// be sent.
func (b *Backend) Open(in *http.Request, body io.Reader) (req *Request, model string, route Route, answer *http.Response, err error) {
	req, _, model, route, answer, err = b.OpenRaw(in, body)
	return req, model, route, answer, err
}

// OpenRaw is Open that also gives the body as the client sent it, for a
// cloud that can send it on unchanged.
func (b *Backend) OpenRaw(in *http.Request, body io.Reader) (req *Request, raw []byte, model string, route Route, answer *http.Response, err error) {
	route = RouteOf(in)
	if route != RouteCreate && route != RouteCount {
		return nil, nil, "", route, b.refuse(in, route), nil
	}
	raw, err = io.ReadAll(body)
	if err != nil {
		return nil, nil, "", route, nil, fmt.Errorf("%s: read the request body: %w", b.Kind, err)
	}
	req, aerr := ParseMessages(raw)
	if aerr != nil {
		return nil, nil, "", route, ErrorAnswer(in, aerr, ""), nil
	}
	model, ok := b.Models[req.Model]
	if !ok {
		return nil, nil, "", route, ErrorAnswer(in, apierror.New(http.StatusBadRequest, "invalid_request_error",
			"model "+strconv.Quote(req.Model)+" is not mapped on the "+b.Label()+"; add it to the backend's models table, or send a model it maps"), ""), nil
	}
	return req, raw, model, route, nil, nil
}

// refuse is the answer for a request a cloud backend does not serve:
// batches (a 400 that says where to send them) or any other endpoint.
func (b *Backend) refuse(in *http.Request, route Route) *http.Response {
	if route == RouteBatch {
		return ErrorAnswer(in, apierror.New(http.StatusBadRequest, "invalid_request_error",
			"Message Batches are not offered on the "+b.Label()+"; send batch requests to a first-party Anthropic backend"), "")
	}
	return ErrorAnswer(in, apierror.New(http.StatusNotFound, "not_found_error",
		in.Method+" "+in.URL.Path+" is not served by the "+b.Label()+"; it serves POST /v1/messages and /v1/messages/count_tokens"), "")
}

// Send sends out with the backend's client; no response is an
// *upstream.Error.
func (b *Backend) Send(out *http.Request) (*http.Response, error) {
	resp, err := b.HTTP.Do(out)
	if err != nil {
		var op *net.OpError
		return nil, &upstream.Error{Upstream: b.Origin(), Dial: errors.As(err, &op) && op.Op == "dial", Err: err}
	}
	return resp, nil
}

// NoCredentials is the *upstream.Error for credentials that could not be
// had: nothing was sent, so, as after a failed dial, the caller may try
// another backend.
func (b *Backend) NoCredentials(err error) *upstream.Error {
	return &upstream.Error{Upstream: b.Origin(), Dial: true, Credentials: true, Err: err}
}
