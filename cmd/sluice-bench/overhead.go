package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/overhead"
)

// overheadFlags are the flags of `sluice bench --overhead`.
type overheadFlags struct {
	on, short, long    bool
	pause              time.Duration
	rounds             int
	duration           time.Duration
	clients, streams   int
	markdown, jsonFile string
	profile, haproxy   string
	sluice             string
}

func (f *overheadFlags) register(fs *flag.FlagSet) {
	d := overhead.Defaults()
	fs.BoolVar(&f.on, "overhead", false, "measure what sluice adds to a call, out of process, against HAProxy (see above)")
	fs.BoolVar(&f.short, "short", false, "with --overhead: a run of a few seconds, whose figures mean little (for tests); with --suite: every scenario scaled down to a tenth of its length, for CI")
	fs.IntVar(&f.rounds, "rounds", d.Rounds, "with --overhead: interleaved `rounds` of every path and phase")
	fs.DurationVar(&f.duration, "duration", d.Duration, "with --overhead: each measurement's recorded span")
	fs.IntVar(&f.clients, "clients", d.Clients, "with --overhead: concurrent clients of the throughput phase")
	fs.IntVar(&f.streams, "streams", d.Streams, "with --overhead: concurrent streams of the stream phase")
	fs.StringVar(&f.markdown, "markdown", "", "with --overhead: also write the table to this `file`")
	fs.StringVar(&f.jsonFile, "json", "", "with --overhead: write every measurement and the rows as JSON to this `file`")
	fs.StringVar(&f.profile, "profile", "", "with --overhead: write pprof CPU and allocation profiles of each sluice into this `directory`")
	fs.StringVar(&f.sluice, "sluice", "", "with --overhead: the sluice `executable` measured (default: the sluice that ran `sluice bench`, else sluice beside this command, else on PATH)")
	fs.StringVar(&f.haproxy, "haproxy", "", "with --overhead: the haproxy executable (default: haproxy on PATH, skipped when absent)")
	l := overhead.LongDefaults()
	fs.BoolVar(&f.long, "long-streams", false, fmt.Sprintf("with --overhead: the long-stream mode instead: --streams concurrent streams (default %d here) of bursts of events with a pause between, for --duration (default %s here), with the proxies' RSS and goroutines per open stream", l.Streams, l.Duration))
	fs.DurationVar(&f.pause, "pause", l.Long.Pause, "with --overhead --long-streams: the pause between a stream's bursts")
}

// run runs the overhead benchmark with a sluice executable as `sluice
// serve` and this command itself as the other children, and prints its
// table.
func (f *overheadFlags) run(fs *flag.FlagSet, quiet bool) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench --overhead: %w", err)
	}
	sluice, err := f.sluiceExe(exe)
	if err != nil {
		return err
	}
	opt := overhead.Defaults()
	switch {
	case f.long:
		opt = overhead.LongDefaults()
		if f.short { // a test's run: a few seconds
			opt.Warmup, opt.Duration, opt.Streams, opt.Long.Pause = 200*time.Millisecond, 2*time.Second, 32, 300*time.Millisecond
		}
	case f.short:
		opt = overhead.Short()
	}
	fs.Visit(func(fl *flag.Flag) { // a flag given beats --short's choice
		switch fl.Name {
		case "rounds":
			opt.Rounds = f.rounds
		case "duration":
			opt.Duration = f.duration
		case "clients":
			opt.Clients = f.clients
		case "streams":
			opt.Streams = f.streams
		case "pause":
			if opt.Long != nil {
				opt.Long.Pause = f.pause
			}
		}
	})
	opt.Exe, opt.Sluice, opt.ProfileDir, opt.HAProxy = exe, sluice, f.profile, f.haproxy
	if !quiet {
		opt.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := overhead.Run(ctx, opt)
	if err != nil {
		return err
	}
	rep.WriteMarkdown(os.Stdout)
	if f.markdown != "" {
		out, err := os.Create(f.markdown)
		if err != nil {
			return err
		}
		rep.WriteMarkdown(out)
		if err := out.Close(); err != nil {
			return err
		}
	}
	if f.jsonFile != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(f.jsonFile, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// sluiceExe is the sluice executable --overhead measures: --sluice; else
// the one that ran this command as `sluice bench` (SluiceExeEnv); else
// sluice beside this command (both installed together); else sluice on
// PATH.
func (f *overheadFlags) sluiceExe(self string) (string, error) {
	if f.sluice != "" {
		return f.sluice, nil
	}
	if p := os.Getenv(SluiceExeEnv); p != "" {
		return p, nil
	}
	if p := filepath.Join(filepath.Dir(self), "sluice"); isExecutable(p) {
		return p, nil
	}
	if p, err := exec.LookPath("sluice"); err == nil {
		return p, nil
	}
	return "", errors.New("bench --overhead measures a sluice executable, and found none: run it as `sluice bench --overhead`, or give --sluice PATH (go build -o /tmp/sluice ./cmd/sluice)")
}

// SluiceExeEnv names the variable in which `sluice bench` tells this
// command its own executable, the sluice --overhead measures.
const SluiceExeEnv = "SLUICE_BENCH_SLUICE"

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}
