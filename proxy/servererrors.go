package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/sluicehq/sluice/apierror"
)

// Go's HTTP server answers a request it cannot parse (bad framing, headers
// past MaxHeaderBytes, an unsupported version or transfer encoding) by
// itself, before any handler runs, in plain text: it writes the whole
// answer to the connection in one write, the status line, exactly these
// two headers and a one-line body. A handler's answer always carries a
// Date header (Go adds one), so no such answer is exactly this shape, and
// a write that is can be said again in the Anthropic shape.
const goServerErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// maxGoServerError bounds the body of one of Go's own error answers (its
// longest is a status text and a short reason).
const maxGoServerError = 512

// shapedListener gives every connection it accepts a shapedConn.
type shapedListener struct{ net.Listener }

func (l shapedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if sc, ok := c.(syscall.Conn); ok {
		return &shapedSocket{shapedConn: shapedConn{Conn: c}, sc: sc}, nil
	}
	return &shapedConn{Conn: c}, nil
}

// shapedConn rewrites the plain-text errors Go's server writes itself as
// Anthropic-shaped JSON errors. It also counts the reads that brought
// bytes, so that the pending-connection bound can tell a connection idle
// between requests from one whose next request has begun to arrive (Go's
// server calls both StateIdle until the request's headers are whole).
type shapedConn struct {
	net.Conn
	reads atomic.Uint64
}

func (c *shapedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.reads.Add(1)
	}
	return n, err
}

// shapedSocket is a shapedConn over a socket: it still reaches the socket
// beneath, so that parking can watch it with epoll. A connection that is
// no socket must not claim to be one.
type shapedSocket struct {
	shapedConn
	sc syscall.Conn
}

func (c *shapedSocket) SyscallConn() (syscall.RawConn, error) { return c.sc.SyscallConn() }

func (c *shapedConn) Write(b []byte) (int, error) {
	var shaped []byte
	switch {
	case isGoServerError(b):
		shaped = shapeServerError(b)
	case isGoExpectationFailed(b):
		shaped = shapeExpectationFailed()
	default:
		return c.Conn.Write(b)
	}
	if _, err := c.Conn.Write(shaped); err != nil {
		return 0, err
	}
	return len(b), nil
}

// goExpectationFailed and goExpectationFailedEnd are the answer Go's
// server writes by itself to a request whose Expect header is not
// 100-continue, around its Date: a handler's answer in form, with exactly
// these headers and no body.
const (
	goExpectationFailed    = "HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: "
	goExpectationFailedEnd = "\r\nContent-Length: 0\r\n\r\n"
)

// isGoExpectationFailed reports whether b is exactly that answer: its
// headers and a Date, nothing else. No answer through the proxy is, since
// ServeHTTP gives every one an X-Sluice-Request-Id.
func isGoExpectationFailed(b []byte) bool {
	rest, ok := bytes.CutPrefix(b, []byte(goExpectationFailed))
	if !ok {
		return false
	}
	date, ok := bytes.CutSuffix(rest, []byte(goExpectationFailedEnd))
	return ok && len(date) < 64 && !bytes.ContainsAny(date, "\r\n")
}

// shapeExpectationFailed is the 417 answer in the Anthropic shape.
func shapeExpectationFailed() []byte {
	var e apierror.Body
	e.Type, e.Error.Type, e.RequestID = "error", "invalid_request_error", apierror.NewRequestID()
	e.Error.Message = "sluice takes no Expect header but Expect: 100-continue; remove it, as the SDKs send none"
	data, _ := json.Marshal(e)
	return fmt.Appendf(nil, "HTTP/1.1 417 Expectation Failed\r\nContent-Type: application/json\r\nRequest-Id: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		e.RequestID, len(data), data)
}

// isGoServerError reports whether b is exactly one of Go's own error
// answers: "HTTP/1.1 NNN text", the two headers, then a short body of one
// line.
func isGoServerError(b []byte) bool {
	line, rest, ok := bytes.Cut(b, []byte("\r\n"))
	if !ok || len(line) < len("HTTP/1.1 400") || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return false
	}
	for _, d := range line[9:12] {
		if d < '0' || d > '9' {
			return false
		}
	}
	body, ok := bytes.CutPrefix(rest, []byte(goServerErrorHeaders[2:]))
	return ok && len(body) <= maxGoServerError && !bytes.ContainsAny(body, "\r\n")
}

// shapeServerError turns one of Go's plain-text error answers into the
// same status with an Anthropic-shaped body.
func shapeServerError(b []byte) []byte {
	line, rest, _ := bytes.Cut(b, []byte(goServerErrorHeaders))
	status := 400
	if len(line) >= len("HTTP/1.1 400") {
		if n, err := strconv.Atoi(string(line[9:12])); err == nil {
			status = n
		}
	}
	typ := "invalid_request_error"
	if status >= 500 && status != 505 {
		typ = "api_error"
	}
	var e apierror.Body
	e.Type, e.Error.Type, e.RequestID = "error", typ, apierror.NewRequestID()
	e.Error.Message = fmt.Sprintf("sluice could not read the HTTP request (%s); send a well-formed HTTP/1.1 request, as the SDKs do", bytes.TrimSpace(rest))
	data, _ := json.Marshal(e)
	return fmt.Appendf(nil, "%s\r\nContent-Type: application/json\r\nRequest-Id: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		line, e.RequestID, len(data), data)
}

// CloseWrite half-closes the socket beneath, as Go's server does before it
// lingers on a connection it refused.
func (c *shapedSocket) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
