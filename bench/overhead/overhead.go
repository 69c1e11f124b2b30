// Package overhead measures what sluice adds to a call, out of process:
// an upstream that answers at once, sluice on the plain and the windowed
// path, HAProxy as the yardstick when it is installed, the least Go proxy
// (net/http and httputil.ReverseProxy) as the yardstick of what any Go
// proxy costs, and a load generator, each a process of its own, driven in interleaved rounds so
// that a busy machine's noise falls on every path alike. It reports the
// added latency at one client, the throughput at many against the
// upstream alone, the CPU each proxy spends per request (from
// /proc/<pid>/stat), and the same for many concurrent streams.
//
// `sluice bench --overhead` runs it: sluice is the sluice executable
// (`sluice serve`), the other children the bench's own executable (the
// upstream, the go-proxy and the load generator under ChildEnv), so
// nothing is built and nothing is shared.
package overhead

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Options says what to run.
type Options struct {
	Exe      string        // the children's executable (ChildEnv: the upstream, the go-proxy, the load)
	Sluice   string        // the sluice executable, run as `Sluice serve`; Exe when empty
	Rounds   int           // each round runs every phase on every path once
	Warmup   time.Duration // each measurement's unrecorded start
	Duration time.Duration // each measurement's recorded span
	Clients  int           // the throughput phase's concurrent clients
	Streams  int           // the stream phase's concurrent streams
	Cap      int           // the windowed path's BATCH_MAX_CONCURRENCY
	// HAProxy is the haproxy executable; empty: looked up on PATH, and
	// skipped (with a word in the report) when it is not there.
	HAProxy string
	// ProfileDir, when set, gets CPU profiles of each sluice over the last
	// round's throughput and stream phases, and each one's allocation
	// profile at the end (PPROF_LISTEN_ADDR).
	ProfileDir string
	Progress   io.Writer // a line per measurement; nil: none
	// Long, when set, runs the long-stream mode instead of the three
	// phases: Streams concurrent streams, each paced as Long says, for
	// Duration; and the windowed path's cap is Streams.
	Long *Pace
}

// Pace is how the upstream paces a long stream, as a thinking model
// does: Bursts bursts of Burst events each (every event flushed on its
// own), with Pause between them.
type Pace struct {
	Burst  int           `json:"burst"`
	Bursts int           `json:"bursts"`
	Pause  time.Duration `json:"pause"`
}

// LongDefaults is the long-stream mode's run: 1,000 streams of three
// bursts of 10 events 2 s apart, for 20 s after a 5 s ramp-up, one round.
func LongDefaults() Options {
	return Options{Rounds: 1, Warmup: 5 * time.Second, Duration: 20 * time.Second, Clients: 64, Streams: 1000, Cap: 1000,
		Long: &Pace{Burst: 10, Bursts: 3, Pause: 2 * time.Second}}
}

// events is how many SSE events a stream paced so carries: message_start
// and content_block_start, the bursts' deltas, content_block_stop,
// message_delta and message_stop.
func (p *Pace) events() int { return 2 + p.Burst*p.Bursts + 3 }

// Defaults is the full run: about two and a half minutes.
func Defaults() Options {
	return Options{Rounds: 5, Warmup: 300 * time.Millisecond, Duration: 2 * time.Second, Clients: 64, Streams: 1000, Cap: 256}
}

// Short is a run of a few seconds, for tests: its figures mean little.
func Short() Options {
	return Options{Rounds: 1, Warmup: 100 * time.Millisecond, Duration: 300 * time.Millisecond, Clients: 8, Streams: 32, Cap: 256}
}

// The paths, in the order of each round.
const (
	Direct   = "direct"
	HAProxy  = "haproxy"
	GoProxy  = "go-proxy" // net/http's server and httputil.ReverseProxy, nothing else (see goproxy.go)
	Plain    = "plain"
	Windowed = "windowed"
)

// The phases of a round.
const (
	phaseLatency    = "latency"    // one client
	phaseThroughput = "throughput" // Options.Clients clients
	phaseStreams    = "streams"    // Options.Streams concurrent streams
)

// target is one path under measurement.
type target struct {
	name   string
	url    string
	sluice bool   // sluice serve, whose /metrics tells its goroutines
	pprof  string // a sluice's pprof address; empty: none
	cmd    *exec.Cmd
	stderr *os.File
}

func (t *target) pid() int {
	if t.cmd == nil {
		return 0
	}
	return t.cmd.Process.Pid
}

// Run runs opt and returns its report.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if opt.Exe == "" || opt.Rounds < 1 || opt.Duration <= 0 || opt.Clients < 1 || opt.Streams < 1 || opt.Cap < 1 {
		return nil, errors.New("overhead: Exe, Rounds, Duration, Clients, Streams and Cap must be set")
	}
	if opt.ProfileDir != "" {
		if err := os.MkdirAll(opt.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "sluice-overhead-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if opt.Long != nil {
		if opt.Long.Burst < 1 || opt.Long.Bursts < 1 || opt.Long.Pause < 0 {
			return nil, errors.New("overhead: a long stream needs at least one burst of at least one event")
		}
		opt.Cap = opt.Streams // every stream in flight at once, as the fleet
	}
	rep := &Report{Rounds: opt.Rounds, Seconds: opt.Duration.Seconds(), Clients: opt.Clients, Streams: opt.Streams, Cap: opt.Cap,
		LoadStart: loadAvg(), Long: opt.Long}

	up, upAddr, err := startServerChild(ctx, opt.Exe, dir, childSpec{Role: "upstream"})
	if err != nil {
		return nil, err
	}
	defer stop(up)
	targets := []*target{{name: Direct, url: "http://" + upAddr}}
	defer func() {
		for _, t := range targets {
			stop(t)
		}
	}()
	hap := opt.HAProxy
	if hap == "" {
		hap, _ = exec.LookPath("haproxy")
	}
	if hap == "" {
		rep.HAProxy = "skipped: haproxy is not on PATH"
	} else {
		t, version, err := startHAProxy(ctx, hap, upAddr, dir, opt.Streams)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
		rep.HAProxy = version
	}
	gp, gpAddr, err := startServerChild(ctx, opt.Exe, dir, childSpec{Role: GoProxy, URL: "http://" + upAddr, Pool: opt.Cap})
	if err != nil {
		return nil, err
	}
	gp.url = "http://" + gpAddr
	targets = append(targets, gp)
	for _, s := range []struct {
		name string
		env  []string
	}{
		{Plain, []string{"BATCH_ENABLED=0"}},
		{Windowed, []string{"BATCH_ENABLED=1", fmt.Sprintf("BATCH_MAX_CONCURRENCY=%d", opt.Cap)}},
	} {
		if opt.Long != nil && s.name == Windowed {
			// A ramp-up of many streams may all wait at once: past the
			// default queue (1,024) they would be shed, not measured.
			s.env = append(s.env, fmt.Sprintf("BATCH_MAX_QUEUE=%d", max(1024, opt.Streams)))
		}
		t, err := startSluice(ctx, cmp.Or(opt.Sluice, opt.Exe), s.name, "http://"+upAddr, dir, opt.ProfileDir != "", s.env)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}

	phases := []struct {
		name    string
		clients int
		stream  bool
	}{{phaseLatency, 1, false}, {phaseThroughput, opt.Clients, false}, {phaseStreams, opt.Streams, true}}
	if opt.Long != nil {
		phases = phases[2:]
	}
	for round := range opt.Rounds {
		last := round == opt.Rounds-1
		for _, ph := range phases {
			for _, t := range targets {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				var prof chan error
				if last && opt.ProfileDir != "" && t.pprof != "" && ph.name != phaseLatency {
					prof = make(chan error, 1)
					go func() {
						prof <- fetchProfile(ctx, t.pprof, fmt.Sprintf("/debug/pprof/profile?seconds=%d", max(1, int(opt.Duration.Seconds()))),
							filepath.Join(opt.ProfileDir, t.name+"-"+ph.name+".cpu.pprof"))
					}()
				}
				var pids []int
				if t.pid() != 0 {
					pids = []int{t.pid()}
				}
				sp := childSpec{Role: "load", URL: t.url, Clients: ph.clients, Warmup: opt.Warmup,
					Duration: opt.Duration, Stream: ph.stream, PIDs: pids, Long: opt.Long}
				if t.sluice {
					sp.Metrics = t.url + "/metrics"
				}
				res, err := runLoad(ctx, opt.Exe, sp)
				if prof != nil {
					if perr := <-prof; err == nil {
						err = perr
					}
				}
				if err != nil {
					return nil, fmt.Errorf("overhead: round %d, %s, %s: %w%s", round+1, ph.name, t.name, err, t.tail())
				}
				rep.Runs = append(rep.Runs, Measurement{Round: round + 1, Path: t.name, Phase: ph.name, Result: *res})
				if opt.Progress != nil {
					fmt.Fprintf(opt.Progress, "round %d %-10s %-8s %8.0f req/s  p50 %.3f ms  errors %d\n",
						round+1, ph.name, t.name, float64(res.Requests)/res.Seconds, res.P50, res.Errors)
				}
			}
		}
	}
	if opt.ProfileDir != "" {
		for _, t := range targets {
			if t.pprof != "" {
				if err := fetchProfile(ctx, t.pprof, "/debug/pprof/allocs", filepath.Join(opt.ProfileDir, t.name+".allocs.pprof")); err != nil {
					return nil, err
				}
			}
		}
	}
	rep.LoadEnd = loadAvg()
	rep.summarize()
	return rep, nil
}
