package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/oidcauth"
	"github.com/sluicehq/sluice/proxy"
)

// exposure is what sluice serve needs beyond loopback: the inbound keys,
// the TLS certificate and the admin listener, each nil when not set.
type exposure struct {
	inbound *proxy.Inbound
	certs   *proxy.Certs
	admin   net.Listener
}

// openExposure loads the inbound keys and the certificate and opens the
// admin listener, as cfg asks; on an error nothing is left open.
func openExposure(cfg config.Config, log *slog.Logger) (*exposure, error) {
	var e exposure
	var err error
	if cfg.InboundAuth() {
		var tokens *oidcauth.Verifier
		if tokens, err = openTokens(cfg, log); err != nil {
			return nil, err
		}
		e.inbound, err = proxy.LoadInbound(proxy.InboundOptions{KeysFile: cfg.InboundKeysFile,
			UpstreamKeyFile: cfg.UpstreamKeyFile, UpstreamKey: os.Getenv("ANTHROPIC_API_KEY"), Tokens: tokens})
		if err != nil {
			return nil, err
		}
		if cfg.InboundKeysFile != "" && !cfg.InboundKeysStore { // the store's keys come later
			if err := cfg.ValidateInboundKeys(e.inbound.Len()); err != nil {
				return nil, err
			}
		}
	}
	if cfg.TLSCertFile != "" {
		if e.certs, err = proxy.LoadCerts(cfg.TLSCertFile, cfg.TLSKeyFile, log); err != nil {
			return nil, err
		}
	}
	if cfg.AdminListenAddr != "" {
		if e.admin, err = net.Listen("tcp", cfg.AdminListenAddr); err != nil {
			return nil, fmt.Errorf("listen on ADMIN_LISTEN_ADDR=%s: %w", cfg.AdminListenAddr, err)
		}
		log.Info("sluice admin listening", "addr", e.admin.Addr().String())
	}
	warnExposed(cfg, log)
	return &e, nil
}

// warnExposed warns of a setup that shows more than it should beyond
// loopback.
func warnExposed(cfg config.Config, log *slog.Logger) {
	if config.IsLoopback(cfg.ListenAddr) {
		return
	}
	if cfg.TLSCertFile == "" {
		log.Warn("LISTEN_ADDR is not a loopback address and TLS is off: API keys cross the network in the clear unless a TLS-terminating proxy is in front; set TLS_CERT_FILE and TLS_KEY_FILE", "listen", cfg.ListenAddr)
	}
	if cfg.AdminListenAddr == "" && (cfg.UIEnabled || cfg.MetricsEnabled) {
		log.Warn("LISTEN_ADDR is not a loopback address and the page and /metrics are served on it: whoever reaches it sees the live feed and the metrics; set ADMIN_LISTEN_ADDR to a loopback or private address", "listen", cfg.ListenAddr)
	}
}

func (e *exposure) tlsConfig() *tls.Config {
	if e.certs == nil {
		return nil
	}
	return e.certs.TLSConfig()
}

// reloadOnHangup reads the inbound keys and the certificate again on each
// SIGHUP until ctx ends or stop is called; a file that does not load
// leaves what is in force, and the log says why. With nothing to reload a
// SIGHUP (systemctl reload) is logged and otherwise ignored: its default
// would end the process.
//
// A reload runs on a goroutine of its own, and nothing waits for it: the
// files are opened only if they are regular (package regfile), but a read
// can still hang (a network file system gone away), and a reload held so
// must not hold up the next SIGHUP's word in the log or the shutdown. A
// SIGHUP that comes while a reload runs is logged and runs once it ends;
// one still running after reloadSlow is logged.
func (e *exposure) reloadOnHangup(ctx context.Context, log *slog.Logger) (stop func()) {
	return e.reloadOn(ctx, log, syscall.SIGHUP)
}

// reloadSlow is how long a reload runs before the log says it still does.
var reloadSlow = 10 * time.Second

func (e *exposure) reloadOn(ctx context.Context, log *slog.Logger, sig os.Signal) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, sig)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var running chan struct{} // closed when the reload under way ends; nil: none runs
		var slow <-chan time.Time
		again := false
		start := func() {
			running = make(chan struct{})
			t := time.NewTimer(reloadSlow)
			slow = t.C
			go func(ended chan struct{}) {
				defer close(ended)
				defer t.Stop()
				e.reload(log)
			}(running)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-quit:
				return
			case <-hup:
				if running == nil {
					start()
					continue
				}
				log.Warn("SIGHUP: a reload is still reading its files; this one runs once it ends")
				again = true
			case <-slow:
				slow = nil
				log.Warn("SIGHUP: the reload has not ended after " + reloadSlow.String() + "; it is still reading its files, and what is in force stays until it ends")
			case <-running:
				running, slow = nil, nil
				if again {
					again = false
					start()
				}
			}
		}
	}()
	return func() { signal.Stop(hup); close(quit); <-done }
}

func (e *exposure) reload(log *slog.Logger) {
	if e.inbound == nil && e.certs == nil {
		log.Info("SIGHUP: nothing to reload (no INBOUND_KEYS_FILE, no TLS_CERT_FILE)")
	}
	if e.inbound != nil {
		before := e.inbound.Budgets()
		if err := e.inbound.Reload(); errors.Is(err, proxy.ErrHeldKeyKept) {
			log.Error("SIGHUP: inbound keys reloaded, but UPSTREAM_KEY_FILE could not be read; the previous upstream key stays in force", "keys", e.inbound.Len(), "err", err)
		} else if err != nil {
			log.Error("SIGHUP: inbound keys not reloaded; the previous keys stay in force", "keys", e.inbound.Len(), "err", err)
		} else {
			log.Info("SIGHUP: inbound keys reloaded", "keys", e.inbound.Len())
			if !slices.EqualFunc(before, e.inbound.Budgets(), budget.Spec.Same) {
				log.Warn("SIGHUP: the keys file's budgets changed; budgets are read at start, so the previous ones stay in force until sluice restarts")
			}
		}
	}
	if e.certs != nil {
		if err := e.certs.Reload(); err != nil {
			log.Error("SIGHUP: TLS certificate not reloaded; the previous one stays in force", "err", err)
		} else {
			log.Info("SIGHUP: TLS certificate reloaded")
		}
	}
}

// close closes the admin listener, for a start-up that fails after
// openExposure.
func (e *exposure) close() {
	if e.admin != nil {
		e.admin.Close()
	}
}

// benchRuns says whether the page may start bench runs (UI_BENCH_RUNS):
// auto allows them only when the page is served on loopback.
func benchRuns(cfg config.Config) bool {
	switch cfg.UIBenchRuns {
	case config.BenchRunsOn:
		return true
	case config.BenchRunsOff:
		return false
	}
	addr := cfg.ListenAddr
	if cfg.AdminListenAddr != "" {
		addr = cfg.AdminListenAddr
	}
	return config.IsLoopback(addr)
}

// openTokens is the checker of OIDC_ISSUER's tokens (nil without one). It
// asks the provider for its discovery document once, briefly: a provider
// that cannot be reached is logged and does not stop sluice, which asks
// again when tokens come (package oidcauth).
func openTokens(cfg config.Config, log *slog.Logger) (*oidcauth.Verifier, error) {
	if cfg.OIDCIssuer == "" {
		return nil, nil
	}
	v, err := oidcauth.New(oidcauth.Options{Issuer: cfg.OIDCIssuer, Audience: cfg.OIDCAudience,
		TenantClaim: cfg.OIDCTenantClaim, GroupsClaim: cfg.OIDCGroupsClaim, Groups: cfg.OIDCGroups})
	if err != nil {
		return nil, fmt.Errorf("OIDC_ISSUER: %w", err)
	}
	if err := v.Discover(context.Background()); err != nil {
		log.Warn("the identity provider cannot be reached now: requests with its tokens are answered 503 until it can (asked again every 10 s); sluice keys work meanwhile", "issuer", cfg.OIDCIssuer, "err", err)
	} else {
		log.Info("taking the identity provider's tokens", "issuer", cfg.OIDCIssuer, "audience", cfg.OIDCAudience, "groups_mapped", len(cfg.OIDCGroups))
	}
	return v, nil
}
