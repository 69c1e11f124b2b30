package proxy

import (
	"errors"

	"github.com/sluicehq/sluice/park"
)

// takeOver takes a stream's connection over from net/http (package park)
// while its handler goes on serving it in place, on the same goroutine. An
// agent's stream stays open for as long as its answer takes, silent most of
// that time (thinking, a tool call), and net/http holds for each open request
// a goroutine reading in the background and 10 KB of buffers, which park lets
// go of; parked instead (the handler returning, the scheduler's goroutine
// serving it) a stream would cost a goroutine started and its stack grown
// anew for each (docs/streams.md). Other requests, and connections that
// cannot be taken over (HTTP/2, HTTP/1.0, TLS), are left as they are. It
// reports true when the takeover lost the connection: there is nobody left to
// answer.
func (p *Proxy) takeOver(ex *exchange) (gone bool) {
	if !ex.desc.Stream || ex.parked != nil {
		return false
	}
	rw, gone := p.takeConn(ex)
	if rw != nil {
		// net/http no longer watches the connection for the client
		// hanging up: rw's context ends then. It carries r's values.
		ex.r = ex.r.WithContext(rw.Context())
	}
	return gone
}

// takeConn takes ex's connection over (package park): from here ex
// answers through rw. rw is nil when the connection cannot be taken over
// (HTTP/2, say), and the request is served as it is; gone reports that the
// takeover lost the connection, and there is nobody left to answer.
func (p *Proxy) takeConn(ex *exchange) (rw *park.Response, gone bool) {
	rw, err := p.parker.Park(ex.w, ex.r)
	switch {
	case errors.Is(err, park.ErrNotParkable):
		return nil, false
	case err != nil:
		// The connection was taken over and then found unusable (a
		// listener serving TLS, say).
		ex.releaseBody()
		p.log.Error("parking failed; the connection is closed", "err", err)
		return nil, true
	}
	ex.rec.parked = true // its access line is letGo's
	ex.w, ex.parked = rw, rw
	return rw, false
}
