// Package upstream is sluice's one shared client to the Anthropic API: a
// tuned transport and connection pool, and the forwarding of a client's
// request (method, path, query, headers, body) to the upstream base URL.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Backend is what sluice sends a client's request to: the Anthropic API
// itself (Client), or a cloud that serves Claude under its own protocol
// (packages under cloud/), which translates the request on the way out
// and the answer on the way back, so that the caller always gets what the
// Anthropic API would answer: a JSON Messages body or an SSE stream, and
// an Anthropic-shaped error otherwise. A failure to get any answer is an
// *Error. Implementations are safe for concurrent use.
type Backend interface {
	// Do sends in's request (method, path, query, end-to-end headers)
	// with body, of length size (-1 if unknown), under ctx. The caller
	// closes the response body. body may be a *Body that the caller
	// releases once a stream is being relayed: a Backend that sends a
	// translation of it makes that with BodyFrom, to be released with it.
	Do(ctx context.Context, in *http.Request, body io.Reader, size int64) (*http.Response, error)
}

var _ Backend = (*Client)(nil)

// ModelLister is a Backend that serves a fixed table of models, named by
// the first-party ids clients send (a cloud's): sluice lists them for GET
// /v1/models when no first-party key can answer it.
type ModelLister interface {
	ModelIDs() []string
}

// Client forwards requests to one upstream. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	transport *http.Transport
}

// Options tune the shared transport. The zero value works.
type Options struct {
	// IdleConnsPerHost is how many idle keep-alive connections to the
	// upstream are kept. If below 100, 100 is used; set it to at least the
	// gate's capacity so that every wave reuses warm connections.
	IdleConnsPerHost int
	// DialTimeout bounds connecting; if zero, 10 s.
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake; if zero, 10 s.
	TLSHandshakeTimeout time.Duration
	// DialContext, if set, replaces the TCP dialer (tests use an in-memory
	// network with it).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// New returns a client for the upstream at base (scheme, host and an
// optional path prefix).
func New(base *url.URL, opt Options) *Client {
	idle := max(opt.IdleConnsPerHost, 100)
	dial := opt.DialTimeout
	if dial == 0 {
		dial = 10 * time.Second
	}
	tlsTimeout := opt.TLSHandshakeTimeout
	if tlsTimeout == 0 {
		tlsTimeout = 10 * time.Second
	}
	dialContext := opt.DialContext
	if dialContext == nil {
		dialContext = (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext
	}
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialContext,
		ForceAttemptHTTP2:     true, // HTTP/2 when the upstream offers it over TLS
		MaxIdleConns:          0,    // no global cap; the per-host cap below governs
		MaxIdleConnsPerHost:   idle,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   tlsTimeout,
		ExpectContinueTimeout: time.Second,
		// The client's Accept-Encoding is forwarded as sent and the body
		// relayed as received: the transport must not decompress on its own.
		DisableCompression: true,
	}
	return &Client{base: base, transport: t}
}

// Base is the upstream base URL.
func (c *Client) Base() *url.URL { return c.base }

// CloseIdleConnections closes pooled connections (at shutdown).
func (c *Client) CloseIdleConnections() { c.transport.CloseIdleConnections() }

// Error is a failure to get a response from the upstream at all.
type Error struct {
	Upstream string // scheme://host of the upstream
	Dial     bool   // the connection could not be made: the request was not sent
	// Credentials: a cloud backend could not get its credentials (a
	// token, signing keys), so the request was not sent (Dial is set too).
	Credentials bool
	Err         error
}

func (e *Error) Error() string {
	if e.Dial {
		return fmt.Sprintf("connect to upstream %s: %v", e.Upstream, e.Err)
	}
	return fmt.Sprintf("call upstream %s: %v", e.Upstream, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Do sends in's method, path, query and end-to-end headers, with body, to
// the upstream under ctx. body has length size (-1 if unknown). The caller
// closes the response body. A *Body is sent as a pass of its own, and is
// what the transport reopens to resend the request: once it is released,
// the transport holds none of its bytes (see Body).
func (c *Client) Do(ctx context.Context, in *http.Request, body io.Reader, size int64) (*http.Response, error) {
	held, isHeld := body.(*Body)
	if isHeld {
		body = nil // attached below
	}
	out, err := http.NewRequestWithContext(ctx, in.Method, c.target(in.URL), body)
	if err != nil {
		return nil, fmt.Errorf("build upstream request: %w", err)
	}
	out.ContentLength = size
	if size == 0 {
		out.Body = http.NoBody
	}
	if isHeld {
		held.Attach(out)
	}
	CopyHeader(out.Header, in.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // keep Go's default User-Agent out
	}
	resp, err := c.transport.RoundTrip(out)
	if err != nil {
		return nil, &Error{Upstream: c.base.Scheme + "://" + c.base.Host, Dial: isDial(err), Err: err}
	}
	return resp, nil
}

// target is the upstream URL for a client's request URL: the base's scheme
// and host, the base's path prefix joined to the request path, the query
// untouched.
func (c *Client) target(u *url.URL) string {
	t := *c.base
	t.Path = c.base.Path + u.Path
	if u.RawPath != "" {
		t.RawPath = c.base.Path + u.RawPath
	}
	t.RawQuery = u.RawQuery
	return t.String()
}

func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// hopByHop are the headers that describe one connection, not the message
// (RFC 9110 §7.6.1), and must not be forwarded.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// CopyHeader copies src's end-to-end headers into dst: everything but the
// hop-by-hop headers and those that src's Connection header names.
func CopyHeader(dst, src http.Header) {
	var named []string
	for _, v := range src["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				named = append(named, http.CanonicalHeaderKey(f))
			}
		}
	}
	// One backing array for every value, not one a header: each header's
	// slice is capped at its own values, so an append to one copies
	// rather than overwriting the next.
	n := 0
	for _, vv := range src {
		n += len(vv)
	}
	vals := make([]string, 0, n)
next:
	for k, vv := range src {
		for _, h := range hopByHop {
			if k == h {
				continue next
			}
		}
		for _, h := range named {
			if k == h {
				continue next
			}
		}
		start := len(vals)
		vals = append(vals, vv...)
		dst[k] = vals[start:len(vals):len(vals)]
	}
}
