package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/sim"
)

// runSim serves the simulated Anthropic API until SIGINT or SIGTERM.
func runSim(args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9090", "address to serve the simulated API on")
	cfg := sim.DefaultConfig()
	cfg.RegisterFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sluice sim [flags]\n\nServe a simulated Anthropic API (see docs/sim.md).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := noArgs(fs, "sim"); err != nil {
		return err
	}

	if cfg.RecordDir != "" {
		// sim.New panics on a folder it cannot make; say so here instead.
		if err := os.MkdirAll(cfg.RecordDir, 0o755); err != nil {
			return fmt.Errorf("--record-dir: %w", err)
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	s := sim.New(cfg)
	defer s.Close()
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Printf("sluice sim: serving the simulated Anthropic API on http://%s", ln.Addr())

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Printf("sluice sim: shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Close the simulator first so hung requests (the hang fault) end and
	// Shutdown does not wait for them.
	s.Close()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
