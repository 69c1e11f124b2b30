package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/redact"
	"github.com/sluicehq/sluice/logbuf"
	"github.com/sluicehq/sluice/proxy"
)

func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	config.RegisterFlags(fs)
	fs.Usage = func() { serveUsage(fs.Output()) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := noArgs(fs, "serve"); err != nil {
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
	// The log's lines (an access line a request) go out together every
	// logFlushDelay rather than one write each (package logbuf); the last
	// ones when serve returns.
	logOut := logbuf.New(os.Stderr, logFlushDelay)
	defer logOut.Close()
	log := newLogger(logOut, cfg.LogFormat, cfg.LogLevel)
	warnMisspelt(log, os.Environ())
	setMemoryLimit(os.LookupEnv, cfg, log)
	cfg = withPublicURL(cfg, ln.Addr(), log)
	ex, err := openExposure(cfg, log)
	if err != nil {
		ln.Close()
		return err
	}
	hs, err := newHandler(ctx, cfg, log, ex.inbound)
	if err != nil {
		ln.Close()
		ex.close()
		return err
	}
	defer hs.flushSpans() // after serve's drain: the last requests' spans go too
	stopPprof, err := servePprof(cfg.PprofListenAddr, log)
	if err != nil {
		ln.Close()
		ex.close()
		return err
	}
	defer stopPprof()
	defer ex.reloadOnHangup(ctx, log)() // before the line that says sluice is up
	logListening(log, ln.Addr(), cfg)
	srv := &proxy.Server{Proxy: hs.proxy, Handler: hs.api, ShutdownDelay: cfg.ShutdownDelay, DrainTimeout: cfg.DrainTimeout, Log: log,
		TLS: ex.tlsConfig(), Admin: ex.admin, AdminHandler: hs.admin}
	return srv.Serve(ctx, ln)
}

// setMemoryLimit sets the runtime's soft memory limit to
// proxy.SoftMemoryLimit unless the user set GOMEMLIMIT (even to off), which
// the runtime has already applied. It reports the limit it set (0: none).
func setMemoryLimit(lookup func(string) (string, bool), cfg config.Config, log *slog.Logger) int64 {
	if _, set := lookup("GOMEMLIMIT"); set {
		return 0
	}
	limit := proxy.SoftMemoryLimit(cfg.BodyBudget)
	debug.SetMemoryLimit(limit)
	log.Debug("soft memory limit set from BODY_BUDGET_MB (set GOMEMLIMIT to choose another)", "limit_mb", limit>>20)
	return limit
}

// serveUsage is `sluice serve --help`, in 80 columns.
func serveUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: sluice serve [--config FILE] [flags]\n\n"+
		"Runs the proxy. Each setting is a flag, an environment variable, or a key of\n"+
		"the TOML file that --config names, keyed by the environment name as below\n"+
		"(BATCH_MAX_CONCURRENCY = 16). A flag beats the environment, which beats the\n"+
		"file, which beats the default.\n\n")
	config.WriteTable(w)
}

// serve runs h (p, or p behind the page) on ln until ctx ends, then shuts
// down gracefully (see proxy.Server): /readyz answers 503 for delay before
// the drain begins.
func serve(ctx context.Context, ln net.Listener, h http.Handler, p *proxy.Proxy, delay, drain time.Duration, log *slog.Logger) error {
	srv := &proxy.Server{Proxy: p, Handler: h, ShutdownDelay: delay, DrainTimeout: drain, Log: log}
	return srv.Serve(ctx, ln)
}

// newServer wraps h, a handler other than the proxy (the demo's simulated
// upstream), in an http.Server with the timeouts no client can hold
// hostage.
func newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       proxy.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
	}
}

// warnMisspelt warns of each variable in environ that looks like a
// misspelt setting, which would otherwise be ignored without a word. The
// value is not logged: it may be a key.
func warnMisspelt(log *slog.Logger, environ []string) {
	for _, m := range config.Misspelt(environ) {
		log.Warn("an environment variable looks like a misspelt setting and is ignored; did you mean "+m.Setting+"?",
			"variable", m.Name, "setting", m.Setting)
	}
}

// logFlushDelay is how late a log line may be written: long enough to
// gather a busy proxy's access lines into one write, short enough that
// someone tailing the log sees no lag.
const logFlushDelay = 50 * time.Millisecond

// newLogger builds the logger that LOG_FORMAT and LOG_LEVEL ask for.
func newLogger(w io.Writer, format config.LogFormat, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// withPublicURL fills in PUBLIC_URL, when it is not set, from the address
// sluice really listens on (so LISTEN_ADDR=127.0.0.1:0 gets its port). An
// unspecified host (0.0.0.0, ::) says nothing about how clients reach
// sluice: it is read as loopback, with a warning.
func withPublicURL(cfg config.Config, addr net.Addr, log *slog.Logger) config.Config {
	if cfg.PublicURL != nil {
		return cfg
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return cfg
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		log.Warn("LISTEN_ADDR has no host; batches' results_url will point at loopback: set PUBLIC_URL to the URL clients reach sluice at", "listen", addr.String())
	}
	scheme := "http"
	if cfg.TLSCertFile != "" {
		scheme = "https"
	}
	cfg.PublicURL = &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}
	return cfg
}

// logListening writes the start-up line. The upstream URL is redacted: a
// password in its userinfo must never reach a log.
func logListening(log *slog.Logger, addr net.Addr, cfg config.Config) {
	log.Info("sluice listening", "addr", addr.String(), "upstream", redact.URL(cfg.UpstreamURL), "public_url", redact.URL(cfg.PublicURL),
		"batch_enabled", cfg.Enabled, "max_size", cfg.MaxSize, "max_wait", cfg.MaxWait,
		"max_concurrency", cfg.MaxConcurrency, "timeout", cfg.Timeout,
		"inbound_keys", cfg.InboundKeysFile != "", "inbound_keys_store", cfg.InboundKeysStore, "oidc_issuer", cfg.OIDCIssuer, "tls", cfg.TLSCertFile != "")
}
