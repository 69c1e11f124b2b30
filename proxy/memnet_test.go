package proxy

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/upstream"
)

// memListener is an in-memory network built on net.Pipe. Goroutines blocked
// on it are durably blocked in a synctest bubble, so HTTP servers and
// clients can run there in virtual time.
type memListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

func (l *memListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
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

// bubbleRig is an upstream, a proxy in front of it, and a client, all on
// in-memory networks inside a synctest bubble.
type bubbleRig struct {
	proxy  *Proxy
	client *http.Client
	url    string
}

// newBubbleRig must be called inside synctest.Test. It stops everything at
// the end of the test so that the bubble's goroutines exit.
func newBubbleRig(t *testing.T, windowed bool, upstreamHandler http.HandlerFunc, edit ...func(*config.Config)) *bubbleRig {
	t.Helper()
	upLn := newMemListener()
	upSrv := &http.Server{Handler: upstreamHandler}
	go upSrv.Serve(upLn)

	cfg := testConfig(t, "http://upstream.test", windowed, edit...)
	uc := upstream.New(cfg.UpstreamURL, upstream.Options{DialContext: upLn.dial})
	p, err := New(cfg, Options{Upstream: uc, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	pxLn := newMemListener()
	pxSrv := &http.Server{Handler: p}
	go pxSrv.Serve(pxLn)

	tr := &http.Transport{DialContext: pxLn.dial}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		pxSrv.Close()
		p.Close()
		upSrv.Close()
	})
	return &bubbleRig{proxy: p, client: &http.Client{Transport: tr}, url: "http://sluice.test"}
}
