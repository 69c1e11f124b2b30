// Package park holds HTTP/1.1 requests that have to wait for a long time
// without net/http's per-connection machinery. A request waiting in
// net/http's server keeps its connection's goroutine (with the stack its
// handler grew, 8 KB), a 4 KB read buffer, a 4 KB write buffer and a 2 KB
// response buffer: 18 KB or more for a request that only waits its turn.
//
// Park takes the connection over (it hijacks it) once the handler has read
// the request body, and returns a Response: an http.ResponseWriter that
// writes HTTP/1.1 straight to the connection, allocating its buffer only
// when the answer begins. A parked request costs no goroutine: on Linux one
// epoll instance per Parker watches every parked socket for a client that
// hangs up or sends its next request (elsewhere, and for connections that
// are not sockets, a small goroutine per connection reads for it). When the
// answer is complete the connection goes back to the http.Server through
// the Listener it came from, as soon as the client sends its next request,
// so keep-alive clients see one ordinary connection throughout.
//
// Only connections accepted through a Parker's Listener can be parked;
// others (HTTP/2, test recorders) get ErrNotParkable and the caller serves
// them in place as usual. The Listener is for plain HTTP/1.1: a server
// that wraps its connections (ServeTLS) must not be given it.
package park

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"sync"
	"time"
)

// ErrNotParkable is returned by Park for a request that cannot be parked:
// not HTTP/1.1, not from a Parker's Listener, or the Parker shutting down.
// Serve it in place.
var ErrNotParkable = errors.New("park: request cannot be parked")

// Parker parks requests and takes their connections back when their answer
// is complete. Its zero value is not usable; call New.
type Parker struct {
	idleTimeout time.Duration

	pollOnce sync.Once
	poll     *epoller // nil until needed, or where there is none

	mu       sync.Mutex
	closing  bool
	live     map[*Response]struct{} // parked: answering, or idle awaiting the next request
	arriving int                    // Park calls past the closing check, not yet in live
	drained  chan struct{}          // closed when live empties while closing
}

// New returns a Parker. idleTimeout is how long a connection whose answer
// is complete may stay idle before it is closed (http.Server.IdleTimeout's
// job for connections that were never parked); if zero, two minutes.
func New(idleTimeout time.Duration) *Parker {
	if idleTimeout <= 0 {
		idleTimeout = 2 * time.Minute
	}
	return &Parker{idleTimeout: idleTimeout, live: map[*Response]struct{}{}}
}

// Park takes over r's connection. It must be called from the handler
// serving r, after r's body has been read to the end and before anything
// was written to w. On success the handler must not touch w again: the
// Response answers r, from the handler's goroutine or another once the
// handler has returned, and its Finish must be called once the answer is
// complete. The Response's Context is cancelled when the client
// hangs up.
func (pk *Parker) Park(w http.ResponseWriter, r *http.Request) (*Response, error) {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 {
		return nil, ErrNotParkable // HTTP/1.0's keep-alive rules are not worth parking for
	}
	// Only a connection from one of our listeners can be handed back, and
	// Hijack cannot be undone: so ask first. net/http puts the
	// connection's LocalAddr in the request context, and a Listener's
	// connections answer with an address that names their listener.
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(*Addr)
	if !ok || addr.l.pk != pk {
		return nil, ErrNotParkable
	}
	pk.mu.Lock()
	if pk.closing {
		pk.mu.Unlock()
		return nil, ErrNotParkable
	}
	pk.arriving++ // so that Shutdown waits for this one too
	pk.mu.Unlock()
	raw, brw, err := http.NewResponseController(w).Hijack()
	c, ok := raw.(*conn)
	if err != nil || !ok {
		pk.done(nil)
		if err == nil { // cannot happen for a connection our listener accepted
			raw.Close()
			return nil, errors.New("park: hijacked connection is not the listener's")
		}
		return nil, ErrNotParkable
	}
	resp := newResponse(pk, c, w.Header(), r)
	// Bytes the client sent after the body (a pipelined next request) sit
	// in net/http's read buffer: keep them for the connection's next turn.
	if n := brw.Reader.Buffered(); n > 0 {
		resp.next, _ = brw.Reader.Peek(n)
		resp.next = append([]byte(nil), resp.next...)
	}
	// net/http's buffers are ours now, and nothing of net/http uses them
	// again; but a handler that goes on serving in place after Park keeps
	// net/http's connection, which points to them: their 8 KB are let go
	// of here.
	*brw.Reader, *brw.Writer = bufio.Reader{}, bufio.Writer{}
	resp.watching = len(resp.next) == 0 // else the client is not waiting on a read we could see fail
	resp.w = pk.watcherFor(c.Conn)
	pk.mu.Lock()
	pk.arriving--
	pk.live[resp] = struct{}{}
	pk.mu.Unlock()
	if resp.watching {
		resp.w.watch(resp)
	}
	return resp, nil
}

// done forgets resp: its connection is closed or back with the server. A
// nil resp is a Park that failed after its closing check.
func (pk *Parker) done(resp *Response) {
	pk.mu.Lock()
	if resp == nil {
		pk.arriving--
	} else {
		delete(pk.live, resp)
	}
	if len(pk.live) == 0 && pk.arriving == 0 && pk.drained != nil {
		close(pk.drained)
		pk.drained = nil
	}
	pk.mu.Unlock()
}

// Parked reports how many connections are parked: answering, or idle after
// their answer and awaiting the client's next request.
func (pk *Parker) Parked() int {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return len(pk.live)
}

// Shutdown refuses new parking, closes the parked connections that are
// idle, and waits for the rest to finish their answers (each then closes
// its connection) until ctx ends; then it closes what is left, which
// cancels those requests' contexts, and waits for them to let go. It
// returns ctx's error if it had to cut connections.
func (pk *Parker) Shutdown(ctx context.Context) error {
	pk.mu.Lock()
	pk.closing = true
	drained := make(chan struct{})
	if len(pk.live) == 0 && pk.arriving == 0 {
		close(drained)
	} else {
		pk.drained = drained
	}
	var idle []*Response
	for r := range pk.live {
		idle = append(idle, r)
	}
	pk.mu.Unlock()
	for _, r := range idle {
		r.closeIfIdle()
	}
	select {
	case <-drained:
		pk.closePoller()
		return nil
	case <-ctx.Done():
	}
	pk.mu.Lock()
	var left []*Response
	for r := range pk.live {
		left = append(left, r)
	}
	pk.mu.Unlock()
	for _, r := range left {
		// Closed first: what the handler writes once cancelled (an empty
		// answer, say) must not reach the client as if it were the answer.
		r.c.Conn.Close()
		r.cancel()
		r.endWatch()
	}
	<-drained
	pk.closePoller()
	return ctx.Err()
}

func (pk *Parker) isClosing() bool {
	pk.mu.Lock()
	defer pk.mu.Unlock()
	return pk.closing
}

// poller is pk's epoller, started on first use; nil where the system has
// none.
func (pk *Parker) poller() *epoller {
	pk.pollOnce.Do(func() { pk.poll = newPoller() })
	return pk.poll
}

// closePoller stops the epoller, if one was started: nothing is parked
// any more.
func (pk *Parker) closePoller() {
	pk.pollOnce.Do(func() {}) // none can start from now on
	if pk.poll != nil {
		pk.poll.close()
	}
}
