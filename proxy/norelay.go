package proxy

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/sluicehq/sluice/apierror"
)

// sluice is no forward proxy and no path-traversal gateway: it sends
// requests only to its UPSTREAM_URL, under that URL's path prefix, and
// passes on no client's claim of where a request came from. The checks
// here run before routing (Proxy.ServeHTTP).

// errNotForwardProxy answers an absolute-form request line for another
// host, or a CONNECT.
var errNotForwardProxy = &apierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
	Message: "sluice is not a forward proxy: it sends requests only to its own UPSTREAM_URL; send API requests to sluice's address with a path such as /v1/messages (set it as the SDK's base URL, not as HTTP_PROXY or HTTPS_PROXY)"}

// errEncodedPath answers a path that still holds percent-escapes once
// decoded, escaped slashes or backslashes, or a semicolon: no API path has
// them, and an upstream or a gateway before it that decodes again could
// read them as dot segments or separators (some read "..;" as "..").
var errEncodedPath = &apierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
	Message: "the path holds encoded slashes, backslashes, percent signs, semicolons or control characters (such as %2f, %5c, %252e, ; or %00), which no API path has; send the path as the SDKs do, such as /v1/messages"}

// refuseRelay is the answer to a request that would make sluice a relay
// to somewhere other than its upstream path; nil for any other.
func (p *Proxy) refuseRelay(r *http.Request) *apierror.Error {
	if r.Method == http.MethodConnect {
		return errNotForwardProxy
	}
	if r.URL.Host != "" && !p.isOwnHost(r) { // absolute-form: GET http://host/path
		return errNotForwardProxy
	}
	if strings.ContainsFunc(r.URL.Path, func(c rune) bool { return c == '%' || c == '\\' || c == ';' || c < ' ' || c == 0x7f }) {
		return errEncodedPath
	}
	if raw := strings.ToLower(r.URL.EscapedPath()); strings.Contains(raw, "%2f") || strings.Contains(raw, "%5c") {
		return errEncodedPath
	}
	return nil
}

// isOwnHost reports whether the host of r's absolute-form request line is
// sluice's own: the address its connection came in on, or PUBLIC_URL's.
func (p *Proxy) isOwnHost(r *http.Request) bool {
	want := withPort(r.URL.Host, r.URL.Scheme)
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && strings.EqualFold(want, local.String()) {
		return true
	}
	if u, err := url.Parse(p.publicBase); err == nil && strings.EqualFold(want, withPort(u.Host, u.Scheme)) {
		return true
	}
	return false
}

// withPort is host with the scheme's default port when it names none.
func withPort(host, scheme string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := "80"
	if scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), port)
}

// dropForwarded removes the headers in which a client says where a request
// came from (Forwarded, X-Forwarded-*, X-Real-Ip), unless its peer is one
// of TRUSTED_PROXIES: anyone can write them, and an upstream or a gateway
// before it may believe them.
func (p *Proxy) dropForwarded(r *http.Request) {
	if len(p.cfg.TrustedProxies) > 0 {
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			for _, pf := range p.cfg.TrustedProxies {
				if pf.Contains(ap.Addr().Unmap()) {
					return
				}
			}
		}
	}
	for k := range r.Header {
		// Underscores too: CGI-style gateways read X_Forwarded_For as
		// X-Forwarded-For.
		name := strings.ReplaceAll(k, "_", "-")
		if strings.EqualFold(name, "Forwarded") || strings.EqualFold(name, "X-Real-Ip") || len(name) > len("X-Forwarded-") && strings.EqualFold(name[:len("X-Forwarded-")], "X-Forwarded-") {
			delete(r.Header, k)
		}
	}
}
