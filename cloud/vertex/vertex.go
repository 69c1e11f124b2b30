// Package vertex is an upstream.Backend that serves the Messages API from
// Claude on Google Vertex AI: it rewrites a client's request into Vertex's
// rawPredict, streamRawPredict or count-tokens call with a bearer token
// from Google's Application Default Credentials, and turns Google's error
// answers into Anthropic-shaped ones. Vertex answers a model's reply and
// its SSE stream as the API does; those are relayed as they are.
package vertex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/cloud/internal/cloudwire"
	"github.com/sluicehq/sluice/internal/regfile"
	"github.com/sluicehq/sluice/upstream"
)

// Kind is the backend kind's name, as configuration and messages say it.
const Kind = "vertex"

// Version is the anthropic_version Vertex AI takes in the body.
const Version = "vertex-2023-10-16"

// Scope is the OAuth scope the default credentials are asked for.
const Scope = "https://www.googleapis.com/auth/cloud-platform"

// Options configure a Client.
type Options struct {
	// Name is the backend's name in configuration, used in error messages.
	Name string
	// Project is the Google Cloud project id. Required.
	Project string
	// Region is the location: a region (us-east5, europe-west1) or
	// "global". Required.
	Region string
	// Endpoint, when set, replaces https://{Region}-aiplatform.googleapis.com
	// (https://aiplatform.googleapis.com for global): scheme, host and an
	// optional path prefix, e.g. the simulator on loopback.
	Endpoint string
	// Models maps the API's model ids to Vertex model names, laid over
	// DefaultModels: an entry adds or replaces one, an empty value
	// removes one.
	Models map[string]string
	// HTTPClient sends the requests; nil means a client of its own.
	HTTPClient *http.Client
	// CredentialsFile, when set, is the credentials JSON this backend
	// uses instead of the default ones (as GOOGLE_APPLICATION_CREDENTIALS
	// does, for this backend alone): a service account key, an external
	// account (workload identity federation) or an authorized user file.
	CredentialsFile string
	// TokenSource gives the bearer tokens; nil means Google's Application
	// Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's
	// application-default login, the metadata server, workload identity)
	// with the cloud-platform scope. Either is wrapped in
	// oauth2.ReuseTokenSource, so a token is fetched again only when it
	// nears its expiry.
	TokenSource oauth2.TokenSource
}

// Client is a Vertex AI backend. It is safe for concurrent use.
type Client struct {
	b       cloudwire.Backend
	project string
	region  string
	tokens  oauth2.TokenSource
}

var (
	_ upstream.Backend     = (*Client)(nil)
	_ upstream.ModelLister = (*Client)(nil)
)

// ModelIDs are the first-party model ids the client's table maps: what
// sluice lists for GET /v1/models when no first-party key can.
func (c *Client) ModelIDs() []string { return c.b.ModelIDs() }

// DefaultModels returns a copy of the built-in model table.
func DefaultModels() map[string]string { return cloudwire.Models(defaultModels, nil) }

// New returns a client for opt. Without opt.TokenSource it looks up the
// Application Default Credentials now (a missing file or an absent
// metadata server is an error at start); tokens are fetched when the
// first request needs one.
func New(ctx context.Context, opt Options) (*Client, error) {
	if opt.Project == "" {
		return nil, errors.New("vertex: project is required (the Google Cloud project id)")
	}
	if opt.Region == "" {
		return nil, errors.New("vertex: region is required: a region such as us-east5, or global")
	}
	endpoint := opt.Endpoint
	if endpoint == "" {
		if opt.Region == "global" {
			endpoint = "https://aiplatform.googleapis.com"
		} else {
			endpoint = "https://" + opt.Region + "-aiplatform.googleapis.com"
		}
	}
	b, err := cloudwire.NewBackend(Kind, opt.Name, endpoint, defaultModels, opt.Models, opt.HTTPClient)
	if err != nil {
		return nil, err
	}
	ts := opt.TokenSource
	// The token fetches' client (oauth2 takes it from the context the
	// credentials are made with): Go's default one waits for ever.
	ctx = context.WithValue(ctx, oauth2.HTTPClient, &http.Client{Timeout: tokenFetchTimeout})
	switch {
	case ts == nil && opt.CredentialsFile != "":
		creds, err := credentialsFile(ctx, opt.CredentialsFile)
		if err != nil {
			return nil, err
		}
		ts = creds.TokenSource
	case ts == nil:
		creds, err := google.FindDefaultCredentials(ctx, Scope)
		if err != nil {
			return nil, fmt.Errorf("vertex: find Google application default credentials: %w", err)
		}
		ts = creds.TokenSource
	}
	return &Client{
		b:       b,
		project: opt.Project,
		region:  opt.Region,
		tokens:  oauth2.ReuseTokenSource(nil, ts),
	}, nil
}

// credentialsFile reads a credentials JSON of one of the kinds ADC reads,
// refusing any other (a file of another type could make the library
// fetch from a place the file names).
func credentialsFile(ctx context.Context, path string) (*google.Credentials, error) {
	data, err := regfile.ReadFile(path, -1)
	if err != nil {
		return nil, fmt.Errorf("vertex: read the credentials file: %w", err)
	}
	var head struct {
		Type google.CredentialsType `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("vertex: credentials file %s is not JSON", path)
	}
	switch head.Type {
	case google.ServiceAccount, google.ExternalAccount, google.AuthorizedUser:
	default:
		return nil, fmt.Errorf("vertex: credentials file %s is of type %q; want service_account, external_account or authorized_user", path, head.Type)
	}
	creds, err := google.CredentialsFromJSONWithType(ctx, data, head.Type, Scope)
	if err != nil {
		return nil, fmt.Errorf("vertex: credentials file %s: %w", path, err)
	}
	return creds, nil
}

// Do answers in, a client's Messages request, through Vertex AI.
func (c *Client) Do(ctx context.Context, in *http.Request, body io.Reader, _ int64) (*http.Response, error) {
	req, model, route, answer, err := c.b.Open(in, body)
	if answer != nil || err != nil {
		return answer, err
	}
	req.Set("anthropic_version", Version)
	var op string
	switch {
	case route == cloudwire.RouteCount:
		// count-tokens names no model in its path: the body keeps it, as
		// Vertex names it.
		req.Set("model", model)
		op = "count-tokens:rawPredict"
	case req.Stream:
		delete(req.Fields, "model")
		op = model + ":streamRawPredict"
	default:
		delete(req.Fields, "model")
		op = model + ":rawPredict"
	}
	payload, err := req.Body()
	if err != nil {
		return nil, fmt.Errorf("vertex: encode the request body: %w", err)
	}
	path := "/v1/projects/" + c.project + "/locations/" + c.region + "/publishers/anthropic/models/"
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, c.b.URL(path+op, path+url.PathEscape(op)), nil)
	if err != nil {
		return nil, fmt.Errorf("vertex: build the request: %w", err)
	}
	// Let go of with the body Do was given: for a stream, once it is
	// being relayed.
	upstream.BodyFrom(body, payload).Attach(out)
	out.Header.Set("Content-Type", "application/json")
	if req.Stream && route == cloudwire.RouteCreate {
		out.Header.Set("Accept", "text/event-stream")
	}
	// Vertex takes betas as the API does, in the header; nothing else of
	// the client's (its x-api-key least of all) goes to Google.
	if betas := cloudwire.Betas(in.Header); len(betas) > 0 {
		out.Header.Set("Anthropic-Beta", strings.Join(betas, ","))
	}
	tok, err := c.token(ctx)
	if err != nil {
		return nil, c.b.NoCredentials(fmt.Errorf("vertex: get a Google access token: %w", err))
	}
	tok.SetAuthHeader(out)
	resp, err := c.b.Send(out)
	if err != nil {
		return nil, err
	}
	id := requestID(resp.Header)
	if resp.StatusCode >= 300 {
		return c.errorAnswer(in, resp, id), nil
	}
	h := http.Header{"Content-Type": resp.Header.Values("Content-Type")}
	if len(h["Content-Type"]) == 0 {
		h.Set("Content-Type", "application/json")
	}
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	if id != "" {
		h.Set("Request-Id", id)
	}
	resp.Header = h
	resp.Request = in
	return resp, nil
}

// token is a bearer token, or ctx's end: oauth2's Token takes no
// context, and a token endpoint or metadata server that accepts and never
// answers would hold the request past its deadline (and, behind
// ReuseTokenSource's lock, every request after it). The fetch left
// behind ends with tokenFetchTimeout.
func (c *Client) token(ctx context.Context) (*oauth2.Token, error) {
	type got struct {
		tok *oauth2.Token
		err error
	}
	ch := make(chan got, 1)
	go func() {
		tok, err := c.tokens.Token()
		ch <- got{tok, err}
	}()
	select {
	case g := <-ch:
		return g.tok, g.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// tokenFetchTimeout bounds one fetch of a token from Google's endpoints
// (the metadata server's client has its own, shorter ones).
const tokenFetchTimeout = 30 * time.Second

// requestID is the id to give the client: Anthropic's, when Vertex
// passes the model server's on, else Google's.
func requestID(h http.Header) string {
	for _, k := range []string{"Request-Id", "X-Request-Id"} {
		if v := h.Get(k); v != "" {
			return v
		}
	}
	return ""
}

// googleError is Google's error body; a streaming method answers it
// wrapped in an array.
type googleError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
	} `json:"error"`
}

// errorAnswer is the Anthropic answer for an error from Vertex: an
// Anthropic-shaped body (the model server's own refusal) as it is, a
// Google error mapped by its status.
func (c *Client) errorAnswer(in *http.Request, resp *http.Response, id string) *http.Response {
	b := cloudwire.ReadErrorBody(resp)
	if _, ok := apierror.Decode(b); ok {
		return cloudwire.Answer(in, resp.StatusCode, b, id)
	}
	var g googleError
	if json.Unmarshal(b, &g) != nil || g.Error.Status == "" && g.Error.Message == "" {
		var list []googleError
		if json.Unmarshal(b, &list) == nil && len(list) > 0 {
			g = list[0]
		}
	}
	st, typ := mapStatus(g.Error.Status, resp.StatusCode)
	msg := g.Error.Message
	if msg == "" {
		msg = "HTTP " + strconv.Itoa(resp.StatusCode)
	}
	text := c.b.Label() + ": "
	if g.Error.Status != "" {
		text += g.Error.Status + ": "
	}
	text += msg
	switch typ {
	case "permission_error", "authentication_error":
		text += " (check the Google credentials of this backend and its access to the project)"
	case "not_found_error":
		text += " (check the backend's project, region and models table)"
	}
	return cloudwire.ErrorAnswer(in, apierror.New(st, typ, text), id)
}

// mapStatus is the Anthropic status and error type for a Google error
// status (google.rpc.Code's name), else for the HTTP status.
func mapStatus(status string, code int) (int, string) {
	switch status {
	case "RESOURCE_EXHAUSTED":
		return http.StatusTooManyRequests, "rate_limit_error"
	case "UNAVAILABLE":
		return 529, "overloaded_error"
	case "INVALID_ARGUMENT", "FAILED_PRECONDITION", "OUT_OF_RANGE":
		return http.StatusBadRequest, "invalid_request_error"
	case "PERMISSION_DENIED":
		return http.StatusForbidden, "permission_error"
	case "UNAUTHENTICATED":
		return http.StatusUnauthorized, "authentication_error"
	case "NOT_FOUND":
		return http.StatusNotFound, "not_found_error"
	case "DEADLINE_EXCEEDED":
		return http.StatusGatewayTimeout, "timeout_error"
	case "INTERNAL", "UNKNOWN", "DATA_LOSS":
		return http.StatusInternalServerError, "api_error"
	}
	return cloudwire.ByStatus(code)
}
