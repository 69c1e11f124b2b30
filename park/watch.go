package park

import (
	"net"
	"syscall"
	"time"
)

// A watcher tells parked Responses when their client sends more bytes or
// hangs up, by calling Response.event once per watch.
type watcher interface {
	// watch starts watching rw's connection.
	watch(rw *Response)
	// idle keeps watching after rw's answer is complete, for at most d:
	// the next request's first bytes are an event, and so is d passing
	// (as the connection's end). It is called with rw.mu held.
	idle(rw *Response, d time.Duration)
	// stop ends the watch. It reports true if no event will come; false
	// if the event has come or is coming, and its handling takes over.
	stop(rw *Response) bool
}

// readWatcher watches with a goroutine per connection, blocked reading one
// byte: it works for any net.Conn, and costs a small stack per parked
// request.
type readWatcher struct{}

func (readWatcher) watch(rw *Response) {
	go func() {
		var b [1]byte
		n, _ := rw.c.Conn.Read(b[:]) // an error is EOF, a reset, a deadline or Shutdown: gone either way
		if n > 0 {
			rw.event(b[:1], false) // the byte is read: it goes back in front of the connection
			return
		}
		rw.event(nil, true)
	}()
}

func (readWatcher) idle(rw *Response, d time.Duration) {
	rw.c.Conn.SetReadDeadline(time.Now().Add(d))
}

// aLongTimeAgo is a deadline in the past, which wakes a blocked Read.
var aLongTimeAgo = time.Unix(1, 0)

func (readWatcher) stop(rw *Response) bool {
	rw.c.Conn.SetReadDeadline(aLongTimeAgo) // the read returns, and reports the end
	return false
}

// watcherFor picks how to watch c: the Parker's poller when c is a socket
// with a descriptor to poll (the poller starts on the first), else a
// goroutine.
func (pk *Parker) watcherFor(c net.Conn) watcher {
	if _, ok := c.(syscall.Conn); ok {
		if p := pk.poller(); p != nil && p.alive() {
			return p
		}
	}
	return readWatcher{}
}
