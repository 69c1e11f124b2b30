package proxy

import (
	"container/list"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// pendingConns bounds the connections that have not yet sent a whole
// request: a connection counts from its accept, or from when it goes idle
// after an answer, until a request of its reaches a handler (and a body
// counts until it is read, see readBody and relay), so slow or idle
// clients cannot use up the process's file descriptors.
//
// At the bound, a new connection takes the place of the connection that
// has been idle longest between requests, which is closed (its client
// reconnects, as after IdleTimeout): otherwise a crowd of idle keep-alive
// connections, which cost the clients nothing to keep, would lock every
// new client out, a load balancer's probe included. Only a connection
// idle since its last answer can be closed so: one that is sending (a new
// one, or an idle one whose next request has begun) keeps its place, so
// the bound still holds against clients that send slowly, and they are
// cut only by the header and body timeouts. A parked request is not
// counted at all (it has sent its request), and is never closed to make
// room. Past the bound with no idle connection, a new connection is
// answered 429 with a retry-after and closed.
type pendingConns struct {
	max   int
	count *pendingCount
	shed  func() // counts a refused connection
	// evicted counts an idle connection closed to make room.
	evicted func()

	mu      sync.Mutex
	waiting map[net.Conn]*pendingConn // counted, no request of its in a handler yet
	idle    list.List                 // of *pendingConn idle between requests, the longest idle first
}

// pendingConn is one counted connection.
type pendingConn struct {
	c     net.Conn
	reads *atomic.Uint64 // reads that brought bytes (see shapedConn); nil if unknown
	// While idle: reads when it went idle, and its place in the idle list.
	readsAtIdle uint64
	elem        *list.Element
}

func (g *pendingConns) track(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateNew:
		if !g.admit(c, false) {
			g.shed()
			refuseConn(c)
		}
	case http.StateIdle:
		// Past the bound an idle connection makes way for none: it is
		// itself the youngest idle one, unless an older one can go.
		if !g.admit(c, true) {
			c.Close()
		}
	case http.StateActive:
		// Its request's headers are in: it is pending until its handler
		// runs, but no longer idle.
		g.mu.Lock()
		if pc := g.waiting[c]; pc != nil {
			g.unidle(pc)
		}
		g.mu.Unlock()
	default: // closed, hijacked
		g.reached(c)
	}
}

// admit counts c, closing the longest-idle connection to make room if
// the bound is reached; it reports false if there was no room to make.
func (g *pendingConns) admit(c net.Conn, idle bool) bool {
	g.mu.Lock()
	if g.waiting == nil {
		g.waiting = map[net.Conn]*pendingConn{}
	}
	pc := g.waiting[c]
	if pc == nil {
		if !g.count.take(g.max) {
			victim := g.oldestIdle()
			if victim == nil {
				g.mu.Unlock()
				return false
			}
			// Its place in the count passes to c: its server goroutine
			// finds it closed and reports it gone, which counts nothing.
			delete(g.waiting, victim.c)
			g.unidle(victim)
			defer victim.c.Close()
			defer g.evicted()
		}
		pc = &pendingConn{c: c, reads: readsOf(c)}
		g.waiting[c] = pc
	}
	if idle && pc.elem == nil {
		if pc.reads != nil {
			pc.readsAtIdle = pc.reads.Load()
		}
		pc.elem = g.idle.PushBack(pc)
	}
	g.mu.Unlock()
	return true
}

// oldestIdle is the connection idle longest that has received nothing
// since its last answer (nothing read by the server, nothing waiting in
// the socket), or nil. Ones that have are sending their next request:
// they leave the idle list. g.mu is held.
func (g *pendingConns) oldestIdle() *pendingConn {
	for e := g.idle.Front(); e != nil; e = g.idle.Front() {
		pc := e.Value.(*pendingConn)
		if (pc.reads == nil || pc.reads.Load() == pc.readsAtIdle) && !unreadBytes(pc.c) {
			return pc
		}
		g.unidle(pc)
	}
	return nil
}

// unidle takes pc out of the idle list; g.mu is held.
func (g *pendingConns) unidle(pc *pendingConn) {
	if pc.elem != nil {
		g.idle.Remove(pc.elem)
		pc.elem = nil
	}
}

// reached stops counting c: a request of its reached a handler, or it is
// gone.
func (g *pendingConns) reached(c net.Conn) {
	g.mu.Lock()
	pc := g.waiting[c]
	if pc != nil {
		delete(g.waiting, c)
		g.unidle(pc)
	}
	g.mu.Unlock()
	if pc != nil {
		g.count.give()
	}
}

// handler tells g when a request reaches h.
func (g *pendingConns) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
			g.reached(c)
		}
		h.ServeHTTP(w, r)
	})
}

// readsOf finds the read count of the shapedConn beneath c, through the
// Parker's connection; nil if there is none.
func readsOf(c net.Conn) *atomic.Uint64 {
	var reads *atomic.Uint64
	walkConn(c, func(c net.Conn) bool {
		switch sc := c.(type) {
		case *shapedSocket:
			reads = &sc.reads
		case *shapedConn:
			reads = &sc.reads
		}
		return reads != nil
	})
	return reads
}

// walkConn calls found on c and on each connection beneath it (through
// the Parker's connection, the shaping and TLS) until found reports true.
func walkConn(c net.Conn, found func(net.Conn) bool) {
	for range 5 {
		if c == nil || found(c) {
			return
		}
		switch u := c.(type) {
		case *shapedConn:
			c = u.Conn
		case interface{ NetConn() net.Conn }:
			c = u.NetConn()
		default:
			return
		}
	}
}

// fdReserve is the file descriptors MAX_PENDING_CONNS never takes from the
// process's limit: standard streams, listeners, the poller, log and store
// files, and the admin listener's connections (its scrapes and probes
// must get through when the API's clients have taken all they may).
const fdReserve = 64

// capPending caps MAX_PENDING_CONNS to what the file limit allows: half of
// what the limit leaves past fdReserve, the other half being for the
// connections whose requests are being served or wait parked, and for
// their upstream connections. Past the limit accept itself fails, and
// then every client hangs unanswered in the accept queue, the admin
// listener's too. nofile 0 means unknown: no cap. It reports whether it
// capped.
func capPending(want int, nofile uint64) (int, bool) {
	if nofile == 0 {
		return want, false
	}
	room := 1
	if nofile > 2*fdReserve {
		room = int(min(nofile-fdReserve, 1<<30) / 2)
	}
	if want > room {
		return room, true
	}
	return want, false
}
