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
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
)

// demoOptions shape the demo's built-in traffic.
type demoOptions struct {
	burst int           // requests per burst; 0 sends no traffic
	every time.Duration // time between bursts
	sim   sim.Config    // the simulated upstream
}

func runDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	config.RegisterFlags(fs)
	opt := demoOptions{sim: sim.DefaultConfig()}
	fs.IntVar(&opt.burst, "burst", 48, "requests in each built-in burst (0: no built-in traffic)")
	fs.DurationVar(&opt.every, "every", 5*time.Second, "time between built-in bursts")
	fs.Usage = func() { demoUsage(fs.Output()) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := noArgs(fs, "demo"); err != nil {
		return err
	}
	cfg, err := config.LoadDefaults(fs, os.LookupEnv, map[string]string{"BATCH_ENABLED": "1"}) // the demo is about windowing
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return demo(ctx, cfg, opt, os.Stdout)
}

// demoUsage is `sluice demo --help`, in 80 columns.
func demoUsage(w io.Writer) {
	fmt.Fprint(w, "Usage: sluice demo [flags]\n\n"+
		"Runs the simulated Anthropic API and a windowed sluice in front of it in one\n"+
		"process, with built-in traffic: a burst every few seconds. UPSTREAM_URL is\n"+
		"ignored; BATCH_ENABLED defaults to 1 here. Flags of its own:\n\n"+
		"  --burst N      requests per burst (default 48; 0: none)\n"+
		"  --every D      time between bursts (default 5s)\n"+
		"  --config FILE  settings from a TOML file, as for sluice serve\n\n"+
		"And the settings of sluice serve:\n\n")
	config.WriteTable(w)
}

// demo serves the simulator on a free loopback port and sluice on
// cfg.ListenAddr in front of it, and sends bursts until ctx ends.
func demo(ctx context.Context, cfg config.Config, opt demoOptions, out io.Writer) error {
	// The demo is one process with its page on its own port, and its
	// traffic brings its own key: none of serve's exposure settings apply.
	cfg.InboundKeysFile, cfg.AdminListenAddr, cfg.TLSCertFile, cfg.TLSKeyFile = "", "", "", ""
	simulator := sim.New(opt.sim)
	defer simulator.Close()
	simLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the simulator: %w", err)
	}
	simSrv := newServer(simulator)
	go simSrv.Serve(simLn)
	defer simSrv.Close()
	cfg.UpstreamURL = &url.URL{Scheme: "http", Host: simLn.Addr().String()}

	ln, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listen on LISTEN_ADDR=%s: %w", cfg.ListenAddr, err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	warnMisspelt(log, os.Environ())
	cfg = withPublicURL(cfg, ln.Addr(), log)
	hs, err := newHandler(ctx, cfg, log, nil)
	if err != nil {
		ln.Close()
		return err
	}
	defer hs.flushSpans() // after serve's drain: the last requests' spans go too
	p, h := hs.proxy, hs.api
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "simulated Anthropic API  %s\n", cfg.UpstreamURL)
	fmt.Fprintf(out, "sluice                   %s  (windowed: %v, window %d or %s, %d slots, deadline %s)\n",
		base, cfg.Enabled, cfg.MaxSize, cfg.MaxWait, cfg.MaxConcurrency, cfg.Timeout)
	fmt.Fprintf(out, "\npoint a client at it:    export ANTHROPIC_BASE_URL=%s ANTHROPIC_API_KEY=sk-demo\n", base)
	fmt.Fprintf(out, "                         curl -s %s/v1/messages -H 'x-api-key: sk-demo' -d '{\"model\":\"claude-sonnet-5-5\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'\n\n", base)

	var traffic sync.WaitGroup
	if opt.burst > 0 {
		traffic.Go(func() { sendBursts(ctx, base, opt, simulator, cfg.MaxConcurrency, out) })
	}
	if cfg.UIEnabled {
		fmt.Fprintf(out, "the page:                %s/ui/\n\n", base)
	}
	err = serve(ctx, ln, h, p, cfg.ShutdownDelay, cfg.DrainTimeout, log)
	traffic.Wait()
	return err
}

// sendBursts sends opt.burst requests at once every opt.every and prints
// one line per burst, until ctx ends.
func sendBursts(ctx context.Context, base string, opt demoOptions, simulator *sim.Server, slots int, out io.Writer) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: opt.burst}}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(opt.every)
	defer tick.Stop()
	for n := 1; ; n++ {
		simulator.Reset() // so that the peak below is this burst's
		start := time.Now()
		lat := make([]time.Duration, opt.burst)
		status := make([]int, opt.burst)
		var wg sync.WaitGroup
		for i := range opt.burst {
			wg.Go(func() {
				stream := i%2 == 1
				body := fmt.Sprintf(`{"model":"claude-sonnet-5-5","max_tokens":128,"stream":%v,"messages":[{"role":"user","content":"demo burst %d request %d"}]}`, stream, n, i)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", strings.NewReader(body))
				if err != nil {
					return
				}
				req.Header.Set("X-Api-Key", "sk-demo")
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status[i], lat[i] = resp.StatusCode, time.Since(start)
			})
		}
		wg.Wait()
		if ctx.Err() != nil {
			return
		}
		ok := 0
		for _, s := range status {
			if s == http.StatusOK {
				ok++
			}
		}
		slices.Sort(lat)
		fmt.Fprintf(out, "burst %d: %d sent, %d ok, latency p50 %s max %s, upstream peak in-flight %d (cap %d)\n",
			n, opt.burst, ok, lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond),
			simulator.Stats().PeakInflight, slots)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
