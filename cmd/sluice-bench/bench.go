package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/bench/plots"
)

// runBench is the command: args are its flags (sluice bench's, after the
// word bench).
func runBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	scenario := fs.String("scenario", "burst", "built-in scenario name ("+strings.Join(bench.Builtin(), ", ")+") or a scenario JSON file")
	out := fs.String("out", "", "directory for report.json, trace.jsonl, series.json and the plots (none if empty)")
	modes := fs.String("modes", "", "comma-separated modes to run in order: direct, plain, windowed, windowed-fifo (windowed with GATE_ORDER=fifo), bulk (each request through /v1/bulk/messages, polled to its result) or the scenario's variants (default: the modes the scenario compares, its \"modes\")")
	suite := fs.Bool("suite", false, "run every built-in scenario through its modes (companions too) and write one report into --out: index.html, summary.md, suite.json and a directory per scenario")
	up := fs.String("upstream", "", "URL of an external `sluice sim` to use instead of an in-process simulator per mode")
	quiet := fs.Bool("quiet", false, "no progress line")
	repeat := fs.Int("repeat", 1, "run each mode `N` times, with seeds seed..seed+N-1, and report the median and range of each figure")
	var ov overheadFlags
	ov.register(fs)
	var rp replayFlags
	rp.register(fs)
	fs.Usage = func() {
		o := fs.Output()
		fmt.Fprint(o, "Usage: sluice bench [--scenario NAME|FILE] [--out DIR] [--modes direct,plain,windowed] [--upstream URL] [--repeat N]\n"+
			"       sluice bench --overhead [--short] [--rounds N] [--duration D] [--markdown FILE] [--json FILE] [--profile DIR]\n\n"+
			"       sluice bench --suite [--short] [--repeat N] [--scenario NAME,...] --out DIR\n"+
			"       sluice bench --replay FILE [--speed X] [--capacity N] [--rpm N] [--itpm N] [--otpm N] [--out DIR]\n\n"+
			"Sends one scenario's workload through each mode, each against a fresh simulator with the same seed,\n"+
			"and prints the modes side by side. With --overhead, measures what sluice adds to a call instead: an\n"+
			"upstream that answers at once, HAProxy (when on PATH), go-proxy (net/http's server and\n"+
			"httputil.ReverseProxy alone: what any Go proxy costs), sluice plain and windowed, and the load\n"+
			"generator, each its own process, in interleaved rounds. Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if ov.on {
		return ov.run(fs, *quiet)
	}
	if *repeat < 1 {
		return fmt.Errorf("bench: --repeat %d: must be at least 1", *repeat)
	}
	if *suite {
		return runSuite(fs, *out, ov.short, *repeat, *quiet, args)
	}
	if rp.file != "" {
		return rp.run(*out, *repeat, *quiet)
	}
	if ov.short {
		return errors.New("bench: --short goes with --suite or --overhead")
	}
	if *out != "" {
		// Before the run, not after it: a long run should not end in a
		// refusal to write its results.
		if err := bench.CheckOutDir(*out); err != nil {
			return err
		}
	}
	sc, err := bench.LoadScenario(*scenario)
	if err != nil {
		return err
	}
	opt := bench.Options{Scenario: sc, Upstream: *up, Repeat: *repeat}
	for _, m := range strings.Split(*modes, ",") {
		if m = strings.TrimSpace(m); m != "" {
			opt.Modes = append(opt.Modes, m)
		}
	}
	if !*quiet {
		opt.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, opt)
	if err != nil {
		return err
	}
	rep.WriteTable(os.Stdout)
	if rep.Verdict() == "" && sc.Verdict != "" {
		// No plain to judge against (a scenario of variants only, such as
		// key-pool): the scenario's own line, as the suite gives it.
		fmt.Printf("\n%s\n", bench.VerdictOf(sc.Verdict, rep, nil, "").Line)
	}
	if *out != "" {
		if err := rep.WriteFiles(*out, plots.Write); err != nil {
			return fmt.Errorf("bench: write %s: %w", *out, err)
		}
		fmt.Printf("\nwrote %s/ %s\n", *out, strings.Join(bench.OutputFiles(), " "))
	}
	return nil
}

// runSuite is sluice bench --suite: every built-in scenario, one report.
func runSuite(fs *flag.FlagSet, out string, short bool, repeat int, quiet bool, args []string) error {
	var set, only []string
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "modes", "upstream":
			set = append(set, f.Name)
		case "scenario": // some of the suite's scenarios, each with its companion
			only = strings.Split(f.Value.String(), ",")
		}
	})
	if len(set) > 0 {
		return fmt.Errorf("bench: --suite runs each scenario through its own modes; drop --%s", strings.Join(set, " and --"))
	}
	for _, n := range only {
		if !slices.Contains(bench.SuiteScenarios(), n) {
			return fmt.Errorf("bench: --suite --scenario %q: not one of the suite's scenarios (%s)", n, strings.Join(bench.SuiteScenarios(), ", "))
		}
	}
	if out == "" {
		return errors.New("bench: --suite needs --out DIR for its report")
	}
	if err := bench.CheckSuiteOutDir(out); err != nil {
		return err
	}
	opt := bench.SuiteOptions{Short: short, Repeat: repeat, Scenarios: only, Command: "sluice bench " + strings.Join(args, " ")}
	if !quiet {
		opt.Progress = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := bench.RunSuite(ctx, opt)
	if err != nil {
		return err
	}
	for _, e := range s.Entries {
		fmt.Printf("%-16s %s\n", e.Scenario, e.Verdict.Line)
	}
	if err := s.WriteFiles(out, plots.Write); err != nil {
		return fmt.Errorf("bench: write %s: %w", out, err)
	}
	fmt.Printf("\nwrote %s/index.html, summary.md, suite.json and a directory per scenario\n", out)
	return nil
}
