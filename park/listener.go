package park

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// Listener wraps ln so that the connections it accepts can be parked, and
// so that parked connections come back to the http.Server serving it when
// their client sends its next request. Serve exactly one http.Server on it.
func (pk *Parker) Listener(ln net.Listener) net.Listener {
	l := &listener{Listener: ln, pk: pk, accepted: make(chan accepted), back: make(chan *conn), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

// listener merges two sources of connections: new ones from the wrapped
// listener, and parked ones handed back.
type listener struct {
	net.Listener
	pk       *Parker
	accepted chan accepted
	back     chan *conn
	done     chan struct{}
	once     sync.Once
}

type accepted struct {
	c   net.Conn
	err error
}

// acceptLoop runs the wrapped listener's Accept so that Accept can wait on
// it and on handed-back connections at once.
func (l *listener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- accepted{c, err}:
		case <-l.done:
			if c != nil {
				c.Close()
			}
			return
		}
		if err != nil && !isTemporary(err) {
			return
		}
	}
}

func isTemporary(err error) bool {
	var ne interface{ Temporary() bool }
	return errors.As(err, &ne) && ne.Temporary()
}

// Accept returns the next new or handed-back connection.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.back:
		return c, nil
	case a := <-l.accepted:
		if a.err != nil {
			return nil, a.err
		}
		c := &conn{Conn: a.c}
		c.addr = &Addr{Addr: a.c.LocalAddr(), l: l}
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the wrapped listener; connections handed back after it are
// closed.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}

// handBack gives c to the server again, or closes it if the listener is
// closed.
func (l *listener) handBack(c *conn) {
	select {
	case l.back <- c:
	case <-l.done:
		c.Conn.Close()
	}
}

// Addr is the local address of a connection accepted through a Parker's
// Listener. It prints as the address it wraps; Park recognises it in the
// request context.
type Addr struct {
	net.Addr
	l *listener
}

// conn is a connection accepted through a listener. next holds bytes read
// from the client while the connection was parked (the start of its next
// request), to be read again by the server.
type conn struct {
	net.Conn
	addr *Addr
	next []byte

	rawOnce sync.Once
	raw     syscall.RawConn // the socket, for Response.WriteNow; nil if none
	now     nowWrite        // WriteNow's system call (Linux)
}

// rawConn is c's socket for Response.WriteNow, looked up once; nil when c
// is no socket.
func (c *conn) rawConn() syscall.RawConn {
	c.rawOnce.Do(func() {
		if sc, ok := c.Conn.(syscall.Conn); ok {
			c.raw, _ = sc.SyscallConn()
		}
	})
	return c.raw
}

func (c *conn) LocalAddr() net.Addr { return c.addr }

// NetConn is the connection c wraps (as tls.Conn's NetConn is), so that a
// server can reach what its own listener put beneath the Parker's.
func (c *conn) NetConn() net.Conn { return c.Conn }

func (c *conn) Read(b []byte) (int, error) {
	if len(c.next) > 0 {
		n := copy(b, c.next)
		c.next = c.next[n:]
		if len(c.next) == 0 {
			c.next = nil
		}
		return n, nil
	}
	return c.Conn.Read(b)
}

// CloseWrite lets the server half-close a connection it answered with
// "Connection: close", as it does for the connections it accepts itself.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
