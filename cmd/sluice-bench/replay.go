package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/bench/plots"
	"github.com/sluicehq/sluice/record"
)

// replayFlags are sluice bench --replay's: the recording, its speed, and
// the simulated upstream it is replayed against.
type replayFlags struct {
	file            string
	speed           float64
	capacity        int
	rpm, itpm, otpm int
	ttft, perToken  time.Duration
	prefillPerToken time.Duration
}

func (r *replayFlags) register(fs *flag.FlagSet) {
	d := bench.DefaultReplaySim
	fs.StringVar(&r.file, "replay", "", "replay a recording (RECORD_FILE, with its rotated .1) through plain and windowed on the simulator, and print the verdict: what windowing would save on that traffic (docs/replay.md)")
	fs.Float64Var(&r.speed, "speed", 1, "with --replay, divide the recorded gaps between requests by this (10: an hour in six minutes)")
	fs.IntVar(&r.capacity, "capacity", d.Capacity, "with --replay, the simulated upstream's generation slots (0: unlimited)")
	fs.IntVar(&r.rpm, "rpm", d.RequestsPerMinute, "with --replay, the simulated requests-per-minute limit of each key (-1: the recording's anthropic-ratelimit-requests-limit times --speed; 0: none)")
	fs.IntVar(&r.itpm, "itpm", d.InputTokensPerMinute, "with --replay, the input-tokens-per-minute limit (-1: the recording's, times --speed; 0: none)")
	fs.IntVar(&r.otpm, "otpm", d.OutputTokensPerMinute, "with --replay, the output-tokens-per-minute limit (-1: the recording's, times --speed; 0: none)")
	fs.DurationVar(&r.ttft, "ttft", d.TTFT.D(), "with --replay, the simulated time to first token")
	fs.DurationVar(&r.perToken, "per-token", d.PerToken.D(), "with --replay, the simulated time per output token")
	fs.DurationVar(&r.prefillPerToken, "prefill-per-token", d.PrefillPerToken.D(), "with --replay, the simulated prefill time per input token not read from the cache")
}

// run is sluice bench --replay FILE.
func (r *replayFlags) run(out string, repeat int, quiet bool) error {
	rec, err := record.Load(r.file)
	if err != nil {
		return err
	}
	sim := bench.DefaultReplaySim
	sim.Capacity, sim.RequestsPerMinute, sim.InputTokensPerMinute, sim.OutputTokensPerMinute = r.capacity, r.rpm, r.itpm, r.otpm
	sim.TTFT, sim.PerToken, sim.PrefillPerToken = bench.Duration(r.ttft), bench.Duration(r.perToken), bench.Duration(r.prefillPerToken)
	sc, err := bench.ReplayScenario(rec, bench.ReplayOptions{Speed: r.speed, Sim: sim})
	if err != nil {
		return err
	}
	if out != "" {
		if err := bench.CheckOutDir(out); err != nil {
			return err
		}
	}
	opt := bench.Options{Scenario: sc, Repeat: repeat}
	if !quiet {
		opt.Progress = os.Stderr
	}
	fmt.Printf("%s; upstream: capacity %d, limits a minute: requests %d, input tokens %d, output tokens %d (0: none)\n\n",
		sc.Description, sc.Sim.Capacity, sc.Sim.RequestsPerMinute, sc.Sim.InputTokensPerMinute, sc.Sim.OutputTokensPerMinute)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, opt)
	if err != nil {
		return err
	}
	rep.WriteTable(os.Stdout)
	fmt.Printf("\n%-16s %s\n", "replay", bench.VerdictOf(sc.Verdict, rep, nil, "").Line)
	if out != "" {
		if err := rep.WriteFiles(out, plots.Write); err != nil {
			return fmt.Errorf("bench: write %s: %w", out, err)
		}
		fmt.Printf("\nwrote %s/ %s\n", out, strings.Join(bench.OutputFiles(), " "))
	}
	return nil
}
