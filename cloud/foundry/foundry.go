// Package foundry is an upstream.Backend that serves the Messages API from
// Claude in Microsoft Foundry. Foundry speaks the Messages API itself at
// https://{resource}.services.ai.azure.com/anthropic/v1/messages: this
// backend sends the client's request there with the resource's
// credential (its API key, from the backend's keys, or a Microsoft Entra
// ID token from Azure's identity library), the model named as the
// resource's deployment, and turns Azure's own error answers into
// Anthropic-shaped ones. Replies, streams and Claude's own errors pass as
// they are.
package foundry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/cloud/internal/cloudwire"
	"github.com/sluicehq/sluice/upstream"
)

// Kind is the backend kind's name, as configuration and messages say it.
const Kind = "foundry"

// Scope is the Microsoft Entra ID scope a token for Foundry is asked for.
const Scope = "https://ai.azure.com/.default"

// Options configure a Client.
type Options struct {
	// Name is the backend's name in configuration, used in error messages.
	Name string
	// Resource is the Foundry resource's name: the endpoint is
	// https://{Resource}.services.ai.azure.com/anthropic. Required unless
	// Endpoint is set.
	Resource string
	// Endpoint, when set, replaces that URL (scheme, host and the path
	// before /v1/messages): a private endpoint, or the simulator on
	// loopback (http://127.0.0.1:9090/anthropic).
	Endpoint string
	// Models maps the API's model ids to the resource's deployment names,
	// laid over DefaultModels: an entry adds or replaces one, an empty
	// value removes one.
	Models map[string]string
	// HTTPClient sends the requests; nil means a client of its own.
	HTTPClient *http.Client
	// UseKeys says the calls carry the resource's API key, which sluice's
	// router puts on each call as x-api-key (the backend's keys). Without
	// it, each call carries a Microsoft Entra ID token from Credential.
	UseKeys bool
	// Credential gives the Entra ID tokens when UseKeys is false; nil
	// means azidentity.NewDefaultAzureCredential (environment, workload
	// identity, managed identity, Azure CLI, ...). azidentity caches a
	// token and fetches a new one before it expires.
	Credential azcore.TokenCredential
}

// Client is a Foundry backend. It is safe for concurrent use.
type Client struct {
	b    cloudwire.Backend
	cred azcore.TokenCredential // nil: the key on the call
}

var (
	_ upstream.Backend     = (*Client)(nil)
	_ upstream.ModelLister = (*Client)(nil)
)

// ModelIDs are the first-party model ids the client's table maps to
// deployments: what sluice lists for GET /v1/models when no first-party
// key can.
func (c *Client) ModelIDs() []string { return c.b.ModelIDs() }

// DefaultModels returns a copy of the built-in model table.
func DefaultModels() map[string]string { return cloudwire.Models(defaultModels, nil) }

// New returns a client for opt. Without keys or a Credential it builds
// Azure's default credential chain now; tokens are fetched when the first
// request needs one.
func New(_ context.Context, opt Options) (*Client, error) {
	endpoint := opt.Endpoint
	switch {
	case endpoint == "" && opt.Resource == "":
		return nil, errors.New("foundry: resource is required (the Foundry resource's name, as in https://{resource}.services.ai.azure.com), or an endpoint")
	case endpoint == "" && strings.ContainsAny(opt.Resource, "/.:@?#"):
		return nil, fmt.Errorf("foundry: resource %q: want the resource's name alone, as in https://{resource}.services.ai.azure.com", opt.Resource)
	case endpoint == "":
		endpoint = "https://" + opt.Resource + ".services.ai.azure.com/anthropic"
	}
	b, err := cloudwire.NewBackend(Kind, opt.Name, endpoint, defaultModels, opt.Models, opt.HTTPClient)
	if err != nil {
		return nil, err
	}
	c := &Client{b: b}
	if !opt.UseKeys {
		c.cred = opt.Credential
		if c.cred == nil {
			cred, err := azidentity.NewDefaultAzureCredential(nil)
			if err != nil {
				return nil, fmt.Errorf("foundry: Azure's default credential chain: %w", err)
			}
			c.cred = cred
		}
	}
	return c, nil
}

// forwarded are the client's headers a Foundry call carries: the API
// version and betas, unchanged, and what says what the body is.
var forwarded = []string{"Anthropic-Version", "Anthropic-Beta", "Content-Type", "Accept"}

// Do answers in, a client's Messages request, through Foundry. The body
// goes as the client sent it, byte for byte, unless the model's deployment
// has another name, when only model is rewritten.
func (c *Client) Do(ctx context.Context, in *http.Request, body io.Reader, _ int64) (*http.Response, error) {
	req, payload, deployment, route, answer, err := c.b.OpenRaw(in, body)
	if answer != nil || err != nil {
		return answer, err
	}
	if deployment != req.Model {
		req.Set("model", deployment)
		if payload, err = req.Body(); err != nil {
			return nil, fmt.Errorf("foundry: encode the request body: %w", err)
		}
	}
	path := "/v1/messages"
	if route == cloudwire.RouteCount {
		path = "/v1/messages/count_tokens"
	}
	out, err := http.NewRequestWithContext(ctx, http.MethodPost, c.b.URL(path, path), nil)
	if err != nil {
		return nil, fmt.Errorf("foundry: build the request: %w", err)
	}
	out.URL.RawQuery = in.URL.RawQuery // ?beta=true, as Claude Code sends it to Foundry
	upstream.BodyFrom(body, payload).Attach(out)
	for _, h := range forwarded {
		if v, ok := in.Header[h]; ok {
			out.Header[h] = v
		}
	}
	if out.Header.Get("Content-Type") == "" {
		out.Header.Set("Content-Type", "application/json")
	}
	secret := ""
	if c.cred == nil {
		// The router put the backend's key on the call (route.Key.Authorize).
		secret = in.Header.Get("X-Api-Key")
		if secret == "" {
			return nil, c.b.NoCredentials(errors.New("foundry: no API key on the call; name the resource's keys in the backend's keys"))
		}
		out.Header.Set("X-Api-Key", secret)
	} else {
		tok, err := c.cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{Scope}})
		if err != nil {
			// Nothing was sent: as a failed dial, the caller may try elsewhere.
			return nil, c.b.NoCredentials(fmt.Errorf("foundry: get a Microsoft Entra ID token: %w", err))
		}
		secret = tok.Token
		out.Header.Set("Authorization", "Bearer "+tok.Token)
	}
	resp, err := c.b.Send(out)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return c.errorAnswer(in, resp, secret), nil
	}
	resp.Header = relayHeader(resp.Header)
	resp.Request = in
	return resp, nil
}

// relayHeader is what a Foundry answer's headers become for the client:
// end-to-end headers as they came (the body's type and length, the
// request id, any rate-limit headers), never the connection's.
func relayHeader(h http.Header) http.Header {
	out := http.Header{}
	upstream.CopyHeader(out, h)
	if out.Get("Request-Id") == "" {
		for _, k := range []string{"Apim-Request-Id", "X-Request-Id", "X-Ms-Request-Id"} {
			if v := out.Get(k); v != "" {
				out.Set("Request-Id", v)
				break
			}
		}
	}
	return out
}

// azureError is Azure's error body: {"error":{"code":...,"message":...}}.
type azureError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// errorAnswer is the Anthropic answer for an error from Foundry: Claude's
// own (an Anthropic-shaped body) as it came, with its headers
// (retry-after among them); Azure's front end's mapped by its status,
// keeping retry-after. secret is scrubbed from any message.
func (c *Client) errorAnswer(in *http.Request, resp *http.Response, secret string) *http.Response {
	b := cloudwire.ReadErrorBody(resp)
	h := relayHeader(resp.Header)
	if _, ok := apierror.Decode(b); ok {
		out := cloudwire.Answer(in, resp.StatusCode, b, h.Get("Request-Id"))
		for k, v := range h {
			if _, set := out.Header[k]; !set {
				out.Header[k] = v
			}
		}
		return out
	}
	var a azureError
	_ = json.Unmarshal(b, &a)
	st, typ := mapStatus(resp.StatusCode, a.Error.Code)
	msg := a.Error.Message
	if msg == "" {
		msg = "HTTP " + strconv.Itoa(resp.StatusCode)
	}
	if secret != "" {
		msg = strings.ReplaceAll(msg, secret, "[redacted]")
	}
	text := c.b.Label() + ": "
	if a.Error.Code != "" && a.Error.Code != strconv.Itoa(resp.StatusCode) {
		text += a.Error.Code + ": "
	}
	text += msg
	switch typ {
	case "authentication_error", "permission_error":
		text += " (check the backend's keys or its Microsoft Entra ID identity and role on the resource)"
	case "not_found_error":
		text += " (check the backend's resource or endpoint and its models table of deployment names)"
	}
	out := cloudwire.ErrorAnswer(in, apierror.New(st, typ, text), h.Get("Request-Id"))
	if ra := h.Get("Retry-After"); ra != "" && st == http.StatusTooManyRequests {
		out.Header.Set("Retry-After", ra)
	}
	return out
}

// mapStatus is the Anthropic status and error type for an Azure error.
func mapStatus(status int, code string) (int, string) {
	switch strings.ToLower(code) {
	case "deploymentnotfound":
		return http.StatusNotFound, "not_found_error"
	case "toomanyrequests", "ratelimitexceeded":
		return http.StatusTooManyRequests, "rate_limit_error"
	}
	switch status {
	case http.StatusServiceUnavailable, 529:
		return 529, "overloaded_error"
	}
	return cloudwire.ByStatus(status)
}
