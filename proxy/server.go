package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/apierror"
)

// Server runs a Proxy on a listener the way sluice serve does: an
// http.Server with the timeouts a public-facing proxy needs, parking of
// waiting requests, a bound on connections that have not yet sent their
// request, and a graceful shutdown that answers everyone it accepted. It
// is the one embedding of a Proxy; tests and the demo use it too.
type Server struct {
	// Proxy is the proxy to run. Required.
	Proxy *Proxy
	// Handler is what the server serves: Proxy, or a handler in front of
	// it (the page). If nil, Proxy.
	Handler http.Handler
	// DrainTimeout is how long in-flight requests may take to finish once
	// shutdown begins (DRAIN_TIMEOUT_S). If zero, none: what is left is
	// cut at once, with an answer.
	DrainTimeout time.Duration
	// ShutdownDelay is how long, once ctx ends, the server goes on accepting
	// and serving as usual with /readyz answering 503, before it stops
	// accepting and the drain begins (SHUTDOWN_DELAY_S): time for a load
	// balancer's readiness probe to take it out of rotation. If zero, the
	// drain begins at once.
	ShutdownDelay time.Duration
	// Log receives the shutdown's progress and the HTTP server's own
	// errors. If nil, the Proxy's logger.
	Log *slog.Logger
	// TLS, if set, makes the server speak TLS on its listener (see Certs):
	// HTTP/1.1 only, and parking works over it as over plain TCP.
	TLS *tls.Config
	// Admin, if set, is the admin listener (ADMIN_LISTEN_ADDR), served
	// with AdminHandler (Proxy.AdminHandler of the page, say) alongside
	// the API from the start until the drain is over.
	Admin        net.Listener
	AdminHandler http.Handler
}

// IdleTimeout is how long a keep-alive connection may sit idle, in the
// server and while parked.
const IdleTimeout = 120 * time.Second

// abortGrace is how long, past the drain deadline, requests that Abort cut
// have to write their answers before their connections are closed.
const abortGrace = 5 * time.Second

// Serve serves on ln until ctx ends, then shuts down: /readyz answers 503
// from then on; after ShutdownDelay it stops accepting, releases open windows
// at once, lets in-flight requests finish for up to
// DrainTimeout, then cuts what is left with an answer (see Proxy.Abort)
// and closes the connections. It returns nil after a shutdown, or the
// error that stopped the server otherwise.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	p := s.Proxy
	log := s.Log
	if log == nil {
		log = p.log
	}
	h := s.Handler
	if h == nil {
		h = p
	}
	if n, capped := capPending(p.cfg.MaxPendingConns, fileLimit()); capped {
		// Before serving, so that the bodies' count (takeBody, relay)
		// sees the same bound as the connections'.
		log.Warn("MAX_PENDING_CONNS capped to fit the process's file limit (RLIMIT_NOFILE): raise the limit (ulimit -n) to allow more",
			"max_pending_conns", p.cfg.MaxPendingConns, "capped_to", n, "rlimit_nofile", fileLimit(), "reserved", fdReserve)
		p.cfg.MaxPendingConns = n
	}
	guard := &pendingConns{max: p.cfg.MaxPendingConns, count: p.pendingConns, shed: p.metrics.Shed.Inc, evicted: p.metrics.IdleConnsClosed.Inc}
	srv := &http.Server{
		Handler:           guard.handler(h),
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ConnState:         guard.track,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if s.TLS != nil {
		// Beneath the shaping and parking, which then see the plain
		// HTTP/1.1 inside: a parked connection is a *tls.Conn, which a
		// goroutine watches (park's epoll needs a bare socket).
		ln = tls.NewListener(ln, s.TLS)
	}
	errc := make(chan error, 1)
	// Parking, so that waiting requests hold no goroutine, over the
	// shaping of Go's own plain-text errors.
	go func() { errc <- srv.Serve(p.Listener(shapedListener{ln})) }()
	if s.Admin != nil {
		admin := s.serveAdmin(log)
		defer admin()
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// First: /readyz is 503 from here to the end. Go's server drops a
	// request read once its Shutdown has begun, so a probe can see the 503
	// only while the server still accepts: during ShutdownDelay.
	p.draining.Store(true)
	if s.ShutdownDelay > 0 {
		log.Info("shutdown signalled: /readyz answers 503; serving on until the drain begins", "shutdown_delay", s.ShutdownDelay)
		t := time.NewTimer(s.ShutdownDelay)
		select {
		case err := <-errc:
			t.Stop()
			return fmt.Errorf("serve: %w", err)
		case <-t.C:
		}
	}
	log.Info("shutting down", "drain_timeout", s.DrainTimeout)
	p.Flush()
	drainCtx, cancel := context.WithTimeout(context.Background(), s.DrainTimeout)
	defer cancel()
	graceCtx, cancelGrace := context.WithTimeout(context.Background(), s.DrainTimeout+abortGrace)
	defer cancelGrace()
	parked := make(chan error, 1)
	go func() { parked <- p.Shutdown(graceCtx) }() // the parked requests, which srv does not see
	err := srv.Shutdown(drainCtx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	if p.Idle(drainCtx) != nil {
		n := p.active.Load()
		p.Abort()
		if p.Idle(graceCtx) != nil {
			log.Warn("drain timeout passed; some answers could not be written in time", "cut", n, "unanswered", p.active.Load())
		} else {
			log.Warn("drain timeout passed; answered the requests still being served with 429", "cut", n)
		}
	}
	srv.Close()
	<-parked
	p.Close()
	<-errc // Serve has returned ErrServerClosed
	return err
}

// connKey carries a request's connection in its context.
type connKey struct{}

// refuseConn answers a connection over the bound, before it has sent its
// request (HTTP lets a server answer early), and closes it.
func refuseConn(c net.Conn) {
	id := apierror.NewRequestID()
	// The shape and status of backPressure's answers (answers.go), written
	// by hand: no request, so no handler, to write it.
	body := `{"type":"error","error":{"type":"rate_limit_error","message":"sluice is holding back this connection: it has MAX_PENDING_CONNS connections that have not yet sent their request; retry after the retry-after delay"},"request_id":"` + id + `"}`
	// Read too: over TLS the write first waits for the client's handshake.
	_ = c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRequest-Id: %s\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", id, len(body), body)
	c.Close()
}

// Start serves on ln in the background, as Serve does, for an embedding
// that has no signal to wait for (tests, the bench). stop shuts the
// server down as a signal would and returns Serve's error once it has
// returned.
func (s *Server) Start(ln net.Listener) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			err = <-served
		})
		return err
	}
}

// serveAdmin serves AdminHandler on Admin until the returned func is
// called: a plain http.Server with the API's timeouts, neither parking nor
// the pending-connection bound (its clients are the operators' own).
func (s *Server) serveAdmin(log *slog.Logger) (stop func()) {
	h := s.AdminHandler
	if h == nil {
		h = s.Proxy.AdminHandler(nil)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(shapedListener{s.Admin}); !errors.Is(err, http.ErrServerClosed) {
			log.Error("the admin listener stopped", "err", err)
		}
	}()
	return func() { srv.Close(); <-done }
}
