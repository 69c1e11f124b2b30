package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
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
	if cfg.InboundKeysFile != "" {
		e.inbound, err = proxy.LoadInbound(proxy.InboundOptions{KeysFile: cfg.InboundKeysFile,
			UpstreamKeyFile: cfg.UpstreamKeyFile, UpstreamKey: os.Getenv("ANTHROPIC_API_KEY")})
		if err != nil {
			return nil, err
		}
		if err := cfg.ValidateInboundKeys(e.inbound.Len()); err != nil {
			return nil, err
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
func (e *exposure) reloadOnHangup(ctx context.Context, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-quit:
				return
			case <-hup:
				e.reload(log)
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
		if err := e.inbound.Reload(); err != nil {
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
