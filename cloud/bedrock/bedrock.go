// Package bedrock is an upstream.Backend that serves the Messages API from
// Claude on Amazon Bedrock: it rewrites a client's request into Bedrock's
// InvokeModel, InvokeModelWithResponseStream or CountTokens call, signs it
// with SigV4 (credentials from the AWS SDK's default chain), and turns the
// answer back into what the Anthropic API would have sent: the JSON body,
// an SSE stream decoded from AWS event-stream frames, or an
// Anthropic-shaped error.
package bedrock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/encoding/httpbinding"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/cloud/internal/cloudwire"
	"github.com/sluicehq/sluice/upstream"
)

// Kind is the backend kind's name, as configuration and messages say it.
const Kind = "bedrock"

// Version is the anthropic_version Bedrock takes in the body.
const Version = "bedrock-2023-05-31"

// signingService is SigV4's service name for the Bedrock runtime.
const signingService = "bedrock"

// Options configure a Client.
type Options struct {
	// Name is the backend's name in configuration, used in error
	// messages so that a user can tell which backend answered.
	Name string
	// Region is the AWS region (us-east-1): the endpoint's and the
	// signature's. Required.
	Region string
	// Endpoint, when set, replaces https://bedrock-runtime.{Region}.amazonaws.com
	// (scheme, host and an optional path prefix): a VPC endpoint, or the
	// simulator on loopback.
	Endpoint string
	// Models maps the API's model ids to Bedrock model ids (or inference
	// profile ids or ARNs), laid over DefaultModels: an entry adds or
	// replaces one, an empty value removes one.
	Models map[string]string
	// HTTPClient sends the requests; nil means a client of its own.
	HTTPClient *http.Client
	// Profile, when set, names the shared config profile the default
	// chain reads (as AWS_PROFILE does, for this backend alone): two
	// Bedrock backends in two accounts each take their own.
	Profile string
	// Credentials, when set, replaces the default chain (environment,
	// shared config and SSO, web identity, container and instance roles):
	// tests give credentials.NewStaticCredentialsProvider. It is wrapped
	// in an aws.CredentialsCache unless it is one.
	Credentials aws.CredentialsProvider
}

// Client is a Bedrock backend. It is safe for concurrent use.
type Client struct {
	b      cloudwire.Backend
	region string
	creds  aws.CredentialsProvider
	signer *v4.Signer
	now    func() time.Time // the signing clock; tests move it
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

// New returns a client for opt. Without opt.Credentials it loads the AWS
// SDK's default configuration, whose credentials are fetched and refreshed
// when a request is signed, not here: a machine whose role is not there
// yet still starts.
func New(ctx context.Context, opt Options) (*Client, error) {
	if opt.Region == "" {
		return nil, errors.New("bedrock: region is required (the endpoint's and the signature's), e.g. us-east-1")
	}
	endpoint := opt.Endpoint
	if endpoint == "" {
		endpoint = "https://bedrock-runtime." + opt.Region + ".amazonaws.com"
	}
	b, err := cloudwire.NewBackend(Kind, opt.Name, endpoint, defaultModels, opt.Models, opt.HTTPClient)
	if err != nil {
		return nil, err
	}
	creds := opt.Credentials
	if creds == nil {
		load := []func(*config.LoadOptions) error{config.WithRegion(opt.Region)}
		if opt.Profile != "" {
			load = append(load, config.WithSharedConfigProfile(opt.Profile))
		}
		cfg, err := config.LoadDefaultConfig(ctx, load...)
		if err != nil {
			return nil, fmt.Errorf("bedrock: load the AWS default configuration: %w", err)
		}
		if cfg.Credentials == nil {
			return nil, errors.New("bedrock: the AWS default configuration has no credential source; set AWS credentials (environment, shared config, SSO, web identity or an instance role)")
		}
		creds = cfg.Credentials
	}
	if _, cached := creds.(*aws.CredentialsCache); !cached {
		creds = aws.NewCredentialsCache(creds)
	}
	return &Client{
		b:      b,
		region: opt.Region,
		creds:  creds,
		signer: v4.NewSigner(),
		now:    time.Now,
	}, nil
}

// Do answers in, a client's Messages request, through Bedrock. Every call
// fetches the (cached) credentials and signs anew, so a retry of the same
// request is signed for its own moment.
func (c *Client) Do(ctx context.Context, in *http.Request, body io.Reader, _ int64) (*http.Response, error) {
	req, modelID, route, answer, err := c.b.Open(in, body)
	if answer != nil || err != nil {
		return answer, err
	}
	delete(req.Fields, "model")
	delete(req.Fields, "stream")
	req.Set("anthropic_version", Version)
	if betas := cloudwire.Betas(in.Header); len(betas) > 0 {
		req.Set("anthropic_beta", betas)
	}
	if route == cloudwire.RouteCount {
		// CountTokens takes an InvokeModel body, which needs max_tokens;
		// count_tokens has none. Its value does not change the count.
		if _, ok := req.Fields["max_tokens"]; !ok {
			req.Set("max_tokens", 1)
		}
	}
	payload, err := req.Body()
	if err != nil {
		return nil, fmt.Errorf("bedrock: encode the request body: %w", err)
	}

	op, accept := "invoke", "application/json"
	switch {
	case route == cloudwire.RouteCount:
		op = "count-tokens"
		payload, _ = json.Marshal(countTokensRequest{Input: countTokensInput{InvokeModel: invokeModelTokens{Body: payload}}})
	case req.Stream:
		op, accept = "invoke-with-response-stream", "application/vnd.amazon.eventstream"
	}
	resp, creds, err := c.send(ctx, modelID, op, accept, payload, body)
	if err != nil {
		return nil, err
	}
	id := resp.Header.Get("X-Amzn-Requestid")
	if resp.StatusCode >= 300 {
		b := cloudwire.ReadErrorBody(resp)
		return cloudwire.ErrorAnswer(in, c.mapError(resp.Header.Get("X-Amzn-Errortype"), resp.StatusCode, b, creds), id), nil
	}
	switch {
	case route == cloudwire.RouteCount:
		return c.countAnswer(in, resp, id), nil
	case req.Stream:
		return streamAnswer(in, resp, id, c.b.Label(), creds), nil
	}
	out := *resp
	out.Header = http.Header{"Content-Type": {"application/json"}}
	if resp.ContentLength >= 0 {
		out.Header.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	if id != "" {
		out.Header.Set("Request-Id", id)
	}
	out.Request = in
	return &out, nil
}

// send signs and sends one call with payload, made from the body Do was
// given (from), and let go of with it (see upstream.BodyFrom). It returns
// the credentials it signed with, so that an error from AWS can be
// scrubbed of them.
func (c *Client) send(ctx context.Context, modelID, op, accept string, payload []byte, from io.Reader) (*http.Response, aws.Credentials, error) {
	// The model id is one path segment, escaped as the AWS SDK escapes
	// a label (a colon as %3A, an ARN's slashes as %2F).
	u := c.b.URL("/model/"+modelID+"/"+op, "/model/"+httpbinding.EscapePath(modelID, true)+"/"+op)
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return nil, aws.Credentials{}, fmt.Errorf("bedrock: build the request: %w", err)
	}
	upstream.BodyFrom(from, payload).Attach(out)
	out.Header.Set("Content-Type", "application/json")
	out.Header.Set("Accept", accept)
	creds, err := c.creds.Retrieve(ctx)
	if err != nil {
		// Nothing was sent: as a failed dial, the caller may try elsewhere.
		return nil, aws.Credentials{}, c.b.NoCredentials(fmt.Errorf("bedrock: get AWS credentials: %w", err))
	}
	sum := sha256.Sum256(payload)
	if err := c.signer.SignHTTP(ctx, creds, out, hex.EncodeToString(sum[:]), signingService, c.region, c.now()); err != nil {
		return nil, creds, fmt.Errorf("bedrock: sign the request: %w", err)
	}
	resp, err := c.b.Send(out)
	return resp, creds, err
}

// countTokensRequest is CountTokens' body: the InvokeModel body, as a
// blob (base64 in JSON).
type countTokensRequest struct {
	Input countTokensInput `json:"input"`
}

type countTokensInput struct {
	InvokeModel invokeModelTokens `json:"invokeModel"`
}

type invokeModelTokens struct {
	Body []byte `json:"body"`
}

// countAnswer turns CountTokens' {"inputTokens": n} into count_tokens'
// {"input_tokens": n}.
func (c *Client) countAnswer(in *http.Request, resp *http.Response, id string) *http.Response {
	b := cloudwire.ReadErrorBody(resp)
	var got struct {
		InputTokens *int `json:"inputTokens"`
	}
	if json.Unmarshal(b, &got) != nil || got.InputTokens == nil {
		return cloudwire.ErrorAnswer(in, apierror.New(http.StatusBadGateway, "api_error",
			c.b.Label()+": CountTokens answered without inputTokens; retry, or count on a first-party backend"), id)
	}
	body, _ := json.Marshal(map[string]int{"input_tokens": *got.InputTokens})
	return cloudwire.Answer(in, http.StatusOK, body, id)
}

// mapError is the Anthropic error for an AWS error answer: the type from
// x-amzn-ErrorType (or the body's __type or code), the cause in the
// message, scrubbed of the credentials that signed the request (AWS's
// signature errors quote the canonical request, which can hold the
// session token).
func (c *Client) mapError(errorType string, status int, body []byte, creds aws.Credentials) *apierror.Error {
	var b struct {
		Message  string `json:"message"`
		Message2 string `json:"Message"`
		Type     string `json:"__type"`
		Code     string `json:"code"`
	}
	_ = json.Unmarshal(body, &b)
	kind := awsErrorType(errorType)
	if kind == "" {
		kind = awsErrorType(b.Type)
	}
	if kind == "" {
		kind = b.Code
	}
	msg := b.Message
	if msg == "" {
		msg = b.Message2
	}
	if msg == "" && len(body) > 0 && !json.Valid(body) {
		msg = string(body)
	}
	// AWS's signature errors go on to quote the canonical request: of no
	// use to the client, and it can hold the session token.
	if i := strings.Index(msg, "\n"); i >= 0 {
		msg = msg[:i]
	}
	msg = scrub(msg, creds)
	st, typ := mapStatus(kind, status)
	text := c.b.Label() + ": "
	if kind != "" {
		text += kind + ": "
	}
	if msg == "" {
		msg = "HTTP " + strconv.Itoa(status)
	}
	text += msg
	switch typ {
	case "permission_error":
		text += " (check the AWS credentials and IAM policy of this backend)"
	case "not_found_error":
		text += " (check the backend's region and its models table)"
	}
	return apierror.New(st, typ, text)
}

// awsErrorType is the error's short name: x-amzn-ErrorType's value before
// its first colon, or a __type's after its '#'.
func awsErrorType(v string) string {
	if i := strings.IndexByte(v, ':'); i >= 0 {
		v = v[:i]
	}
	if i := strings.LastIndexByte(v, '#'); i >= 0 {
		v = v[i+1:]
	}
	return strings.TrimSpace(v)
}

// mapStatus is the Anthropic status and error type for a Bedrock error.
func mapStatus(kind string, status int) (int, string) {
	switch strings.ToLower(strings.TrimSuffix(kind, "Exception")) {
	case "throttling", "servicequotaexceeded", "toomanyrequests":
		return http.StatusTooManyRequests, "rate_limit_error"
	case "serviceunavailable", "modelnotready":
		return 529, "overloaded_error"
	case "validation":
		return http.StatusBadRequest, "invalid_request_error"
	case "accessdenied", "unrecognizedclient", "invalidsignature", "expiredtoken",
		"incompletesignature", "missingauthenticationtoken":
		return http.StatusForbidden, "permission_error"
	case "resourcenotfound":
		return http.StatusNotFound, "not_found_error"
	case "modeltimeout":
		return http.StatusGatewayTimeout, "timeout_error"
	case "internalserver", "modelerror", "modelstreamerror":
		return http.StatusInternalServerError, "api_error"
	}
	return cloudwire.ByStatus(status)
}

// scrub removes the credentials from s, should an error ever quote them.
func scrub(s string, creds aws.Credentials) string {
	for _, secret := range []string{creds.SecretAccessKey, creds.SessionToken, creds.AccessKeyID} {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "[redacted]")
		}
	}
	return s
}

// decodeChunk is a chunk event's payload: one Messages stream event,
// base64 in "bytes".
func decodeChunk(payload []byte) ([]byte, error) {
	// A []byte member is decoded from base64 by encoding/json straight
	// from the payload: no copy of the base64 as a string first.
	var chunk struct {
		Bytes []byte `json:"bytes"`
	}
	if err := json.Unmarshal(payload, &chunk); err != nil {
		return nil, fmt.Errorf("chunk payload is not JSON, or its bytes not base64: %w", err)
	}
	return chunk.Bytes, nil
}
