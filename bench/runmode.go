package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sim"
)

func runMode(ctx context.Context, sc *Scenario, mode, label string, arrivals []Arrival, opt Options) (*ModeResult, error) {
	res := &ModeResult{Mode: mode, Windowed: sc.Windowed(mode)}
	var (
		upURL  string
		stats  upstreamStats
		ulog   *upstreamLog
		bucket func() float64 // the input-token bucket's level, when sampled
	)
	if opt.Upstream == "" {
		s := sim.New(sc.SimConfig())
		defer s.Close()
		ulog = &upstreamLog{calls: map[string]*Interval{}}
		srv := httptest.NewServer(ulog.wrap(s))
		defer srv.Close()
		upURL = srv.URL
		stats = func() (sim.Stats, error) { return s.Stats(), nil }
		if _, size, ok := s.InputTokenBucket(); ok {
			res.InputBucketSize = size
			bucket = func() float64 { level, _, _ := s.InputTokenBucket(); return level }
		}
	} else {
		upURL = strings.TrimRight(opt.Upstream, "/")
		hc := &http.Client{Timeout: 5 * time.Second}
		if err := simReset(ctx, hc, upURL); err != nil {
			return nil, err
		}
		stats = func() (sim.Stats, error) { return simStats(ctx, hc, upURL) }
	}

	base := upURL
	var p *proxy.Proxy
	var budgets *budget.Set // the scenario's, read when the run is over
	if mode != ModeDirect {
		cfg := sc.ModeConfig(mode)
		u, err := url.Parse(upURL)
		if err != nil {
			return nil, fmt.Errorf("upstream URL: %w", err)
		}
		cfg.UpstreamURL = u
		res.KeyNames = keyNames(cfg.Backends)
		if res.Windowed {
			res.Cap, res.MaxWait = cfg.MaxConcurrency, cfg.MaxWait
		}
		popt := proxy.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if opt.Observer != nil {
			popt.Observer = opt.Observer(mode)
		}
		if opt.Recorder != nil {
			popt.Recorder = opt.Recorder(mode)
		}
		if mode == ModeBulk {
			svc, err := startBulk(ctx, cfg, popt.Logger)
			if err != nil {
				return nil, err
			}
			defer svc.Close() // after the proxy has stopped (deferred below)
			popt.Bulk = svc
		}
		parts, err := assemble.Build(cfg, assemble.Env{Log: popt.Logger, Getenv: benchEnv, Cloud: benchCloud(cfg.UpstreamURL.String())}) // as sluice serve builds them
		if err != nil {
			return nil, err
		}
		popt.Parts, budgets = *parts, parts.Budgets
		p, err = proxy.New(cfg, popt)
		if err != nil {
			return nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listen for the proxy: %w", err)
		}
		stop := (&proxy.Server{Proxy: p}).Start(ln) // as sluice serve runs it
		defer stop()
		base = "http://" + ln.Addr().String()
	}

	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	c := &client{
		http: &http.Client{Transport: tr}, base: base, model: sc.Workload.Model, timeout: sc.ClientTimeout(),
		prefix: sharedPrefix(sc.Workload.SharedPrefixTokens - sc.Workload.SharedTools*toolTokens),
		tools:  sharedTools(sc.Workload.SharedTools),
		policy: retryPolicy{max: sc.MaxRetries(), jitter: lockedJitter(uint64(sc.Seed))},
		bulk:   mode == ModeBulk, noOutputHint: slices.Contains(opt.Modes, ModeBulk),
	}
	if sc.Workload.PrefixPerSession {
		c.prefix, c.sessionPrefix = "", sc.Workload.SharedPrefixTokens
	}
	if c.model == "" {
		c.model = "claude-sonnet-4-5"
	}
	if sc.Workload.Shape == ShapeClaudeCode {
		c.claudeCode = newClaudeCodeShape(sc.Seed, sc.Workload.PromptTokens)
	}

	every := opt.SampleEvery
	if every <= 0 {
		every = 10 * time.Millisecond
	}
	start := time.Now()
	res.Start = start
	if ulog != nil {
		ulog.start = start
	}
	var outstanding, sent, done, okCount atomic.Int64
	sample := func() Sample {
		s := Sample{T: time.Since(start), Outstanding: int(outstanding.Load())}
		if st, err := stats(); err == nil {
			s.UpstreamInflight = int(st.Inflight)
		}
		if bucket != nil {
			s.InputBucket = bucket()
		}
		if p != nil {
			s.Queued = p.Queued()
			st := p.GateStats()
			s.GateInflight, s.GateCapacity = st.InFlight, st.Capacity
		}
		return s
	}
	prog := newProgress(opt.Progress, opt.ProgressEvery, start)
	stopSampling := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				res.Samples = append(res.Samples, sample())
				return
			case <-tick.C:
			}
			s := sample()
			res.Samples = append(res.Samples, s)
			prog.update(time.Now(), fmt.Sprintf("%-8s %5.1fs  sent %d/%d  done %d  ok %d  upstream in-flight %d  queued %d",
				label, s.T.Seconds(), sent.Load(), len(arrivals), done.Load(), okCount.Load(), s.UpstreamInflight, s.Queued))
		}
	})

	outcomes := make([]Outcome, len(arrivals))
	sentAt := make([]time.Time, len(arrivals))
	var reqs sync.WaitGroup
	timer := time.NewTimer(0)
	<-timer.C
	for _, job := range sessionsOf(arrivals) {
		if d := time.Until(start.Add(arrivals[job[0]].At)); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		reqs.Go(func() {
			// A session's turns one after the other; a lone request is a
			// session of one.
			for _, i := range job {
				if ctx.Err() != nil {
					outcomes[i] = Outcome{Lost: true, ErrorType: "not_sent"}
					continue
				}
				sent.Add(1)
				outstanding.Add(1)
				sentAt[i] = time.Now()
				o := c.do(ctx, i, arrivals[i])
				outcomes[i] = o
				if o.OK {
					okCount.Add(1)
				}
				done.Add(1)
				outstanding.Add(-1)
			}
		})
	}
	reqs.Wait()
	close(stopSampling)
	bg.Wait()
	prog.done(fmt.Sprintf("%-8s %5.1fs  sent %d  ok %d  done", label, time.Since(start).Seconds(), sent.Load(), okCount.Load()))
	st, err := settledStats(stats)
	if err != nil {
		return nil, err
	}
	res.Sim = st
	res.Budgets = budgets.Statuses() // every answer counted: the run waited for them

	ms := func(t time.Time) float64 { return float64(t.Sub(start)) / float64(time.Millisecond) }
	opt2 := func(t time.Time) *float64 {
		if t.IsZero() {
			return nil
		}
		v := ms(t)
		return &v
	}
	for i, a := range arrivals {
		o := outcomes[i]
		arrival := float64(a.At) / float64(time.Millisecond)
		if a.Turn > 0 && !sentAt[i].IsZero() {
			arrival = ms(sentAt[i]) // a later turn arrives when it is sent
		}
		r := Record{Mode: mode, ID: i, Tenant: a.Tenant, Session: a.Session, Turn: a.Turn, Stream: a.Stream, PromptTokens: a.PromptTokens, OutputTokens: a.OutputTokens,
			ArrivalMS: arrival, FirstByteMS: opt2(o.FirstByte),
			FirstTokenMS: opt2(o.FirstTok), Status: o.Status, Retries: o.Retries, ErrorType: o.ErrorType, Outcome: "error",
			CacheWrite: o.CacheWrite, CacheRead: o.CacheRead}
		if !o.Done.IsZero() {
			r.DoneMS = ms(o.Done)
		}
		switch {
		case o.Lost:
			r.Outcome = "lost"
		case o.OK:
			r.Outcome, r.ErrorType = "ok", ""
		}
		if ulog != nil {
			ulog.mu.Lock()
			if iv, ok := ulog.calls[fmt.Sprintf("%d.%d", i, o.Retries)]; ok {
				v := float64(iv.Start) / float64(time.Millisecond)
				r.SlotMS = &v
			}
			ulog.mu.Unlock()
		}
		res.Records = append(res.Records, r)
	}
	if ulog != nil {
		ulog.mu.Lock()
		for _, iv := range ulog.calls {
			if iv.End >= 0 {
				res.Upstream = append(res.Upstream, *iv)
			}
		}
		ulog.mu.Unlock()
	}
	return res, nil
}

// sessionsOf groups the arrivals' indices by session, each session's in
// turn order, in the order of the sessions' first arrivals. Without turns
// every arrival is a session of its own.
func sessionsOf(arrivals []Arrival) [][]int {
	var jobs [][]int
	at := map[int]int{} // session -> its job
	for i, a := range arrivals {
		if a.Turns <= 1 {
			jobs = append(jobs, []int{i})
			continue
		}
		j, ok := at[a.Session]
		if !ok {
			j = len(jobs)
			at[a.Session] = j
			jobs = append(jobs, nil)
		}
		jobs[j] = append(jobs[j], i)
	}
	return jobs
}

// lockedJitter is a seeded jitter source safe for concurrent use.
func lockedJitter(seed uint64) func() float64 {
	var mu sync.Mutex
	f := newJitter(seed)
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return f()
	}
}
