// Package memnet is an in-memory network for tests, built on net.Pipe.
// Goroutines blocked on it are durably blocked in a synctest bubble, so HTTP
// servers and clients can run there in virtual time.
package memnet

import (
	"context"
	"net"
	"sync"
)

// Listener accepts the connections that Dial makes.
type Listener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

// NewListener returns an open Listener.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next Dial.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Dial fail from now on.
func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

// Addr is a made-up loopback address.
func (l *Listener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// Dial connects to l; its signature fits http.Transport.DialContext.
func (l *Listener) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
