package tenants

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/request"
)

// The headers Anthropic's gateway (claude gateway) names the developer it
// signed in with, on each request to an anthropic upstream whose
// forward_user_identity is true: the IdP's email and subject, each
// percent-encoded past printable ASCII. The gateway sends only the
// client headers it allowlists (anthropic-*, content-type, x-stainless-*
// and the like), so a developer cannot send these through it.
// LiteLLMEndUserHeader, the email again, is for LiteLLM as an upstream.
const (
	GatewayUserEmailHeader = "X-Claude-Gateway-User-Email"
	GatewayUserIDHeader    = "X-Claude-Gateway-User-Id"
	LiteLLMEndUserHeader   = "X-Litellm-End-User-Id"
)

// GatewayIdentityHeaders are the gateway's identity headers: addressed to
// the proxy at its base_url, and never sent further (the gateway itself
// refuses to send them to Anthropic), whatever TENANT_FROM is.
var GatewayIdentityHeaders = [...]string{GatewayUserEmailHeader, GatewayUserIDHeader, LiteLLMEndUserHeader}

// gatewayUser is the developer Anthropic's gateway names in h: the email,
// else the IdP subject, decoded from the gateway's percent-encoding;
// valid UTF-8, cut to maxTenantName (a label value of the metrics).
func gatewayUser(h http.Header) string {
	for _, name := range [...]string{GatewayUserEmailHeader, GatewayUserIDHeader} {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			continue
		}
		if dec, err := url.PathUnescape(v); err == nil {
			v = dec
		}
		return request.Cut(strings.ToValidUTF8(v, "\uFFFD"), maxTenantName)
	}
	return ""
}
