package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	config.RegisterFlags(fs)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintln(out, "Usage: sluice serve [flags]\n\nRuns the proxy. Each setting is a flag or an environment variable;")
		fmt.Fprint(out, "a flag beats the environment, which beats the default.\n\n")
		config.WriteTable(out)
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.LoadEnv(fs)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on LISTEN_ADDR=%s: %w", cfg.ListenAddr, err)
	}
	log := newLogger(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	p, h, err := newHandler(ctx, cfg, log)
	if err != nil {
		return err
	}
	log.Info("sluice listening", "addr", ln.Addr().String(), "upstream", cfg.UpstreamURL.String(),
		"batch_enabled", cfg.Enabled, "max_size", cfg.MaxSize, "max_wait", cfg.MaxWait,
		"max_concurrency", cfg.MaxConcurrency, "timeout", cfg.Timeout)
	return serve(ctx, ln, h, p, cfg.DrainTimeout, log)
}

// serve runs h (p, or p behind the page) on ln until ctx ends, then shuts down gracefully: it stops
// accepting, releases open windows at once, and lets in-flight requests
// finish for up to drain before cutting what is left.
func serve(ctx context.Context, ln net.Listener, h http.Handler, p *proxy.Proxy, drain time.Duration, log *slog.Logger) error {
	srv := newServer(h)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(p.Listener(ln)) }() // so that waiting requests can be parked
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "drain_timeout", drain)
	p.Flush()
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	parked := make(chan error, 1)
	go func() { parked <- p.Shutdown(sctx) }() // the parked requests, which srv does not see
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		srv.Close()
		err = nil
	}
	<-parked
	if sctx.Err() != nil {
		log.Warn("drain timeout passed; closed the connections still open")
	}
	p.Close()
	<-errc // Serve has returned ErrServerClosed
	return err
}

// idleTimeout is how long a keep-alive connection may sit idle, in the
// server and while parked (proxy.Options.IdleTimeout).
const idleTimeout = 120 * time.Second

// newServer wraps h in an http.Server with the timeouts a public-facing
// proxy needs so that no client can hold it hostage.
func newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    1 << 20,
	}
}

// newLogger builds the logger that LOG_FORMAT and LOG_LEVEL ask for; the
// config has already checked both words.
func newLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
