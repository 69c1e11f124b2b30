package bench

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/record"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/statuswriter"
)

// The modes a scenario runs through.
const (
	ModeDirect   = "direct"   // the client talks to the upstream, no sluice
	ModePlain    = "plain"    // through sluice with BATCH_ENABLED=0
	ModeWindowed = "windowed" // through sluice with windowing on
	// ModeWindowedFIFO is windowed with GATE_ORDER=fifo: one line for
	// every tenant, the seed's order, against windowed's default fair one.
	ModeWindowedFIFO = "windowed-fifo"
	// ModeBulk sends each request to sluice's bulk endpoint
	// (/v1/bulk/messages, with a store in a temporary DATA_DIR) and
	// long-polls it until it has ended: the same work as a Message Batch,
	// at half the price; its latency is submission to result.
	ModeBulk = "bulk"
)

// Options configure Run.
type Options struct {
	// Scenario is what to run. Required.
	Scenario *Scenario
	// Modes to run, in order. If empty, the scenario's (DefaultModes).
	Modes []string
	// Upstream is the URL of an external simulator (`sluice sim`). If
	// empty, each mode gets a fresh in-process simulator. An external one
	// is reset (POST /sim/reset) before each mode; its spike schedule runs
	// from its own start, and per-request upstream times are not known.
	Upstream string
	// Progress, if set, gets the run's progress: a line updated in place
	// when it is a terminal, else a plain line every ProgressEvery.
	Progress io.Writer
	// ProgressEvery is the plain lines' period. Zero means 5s.
	// Repeat runs every mode this many times, the i-th time (from 0) with
	// the scenario's seed + i, so that a difference between modes can be
	// told from the run-to-run noise. Zero or one means once.
	Repeat        int
	ProgressEvery time.Duration
	// SampleEvery is how often upstream in-flight and queue depth are
	// sampled. Zero means 10ms.
	SampleEvery time.Duration
	// Observer, if set, is asked for an observer to give each mode's proxy
	// (proxy.Options.Observer); it may return nil.
	Observer func(mode string) proxy.Observer
	// Recorder, if set, is asked for a recorder to give each mode's proxy
	// (proxy.Options.Recorder, RECORD_FILE); it may return nil.
	Recorder func(mode string) *record.Recorder
}

// Sample is one reading of the gauges, at T since the run's start.
type Sample struct {
	T                time.Duration
	UpstreamInflight int // requests in generation at the simulator
	Queued           int // sluice's windowed requests waiting (window or slot)
	GateInflight     int // slots held in sluice's gate
	GateCapacity     int // the gate's limit: its slots in all, adaptive or not
	Outstanding      int // client requests not yet ended
	// InputBucket is the in-process simulator's input-token bucket level
	// (sim.Server.InputTokenBucket: the most spent credential's), when
	// ModeResult.InputBucketSize says there is one.
	InputBucket float64
}

// Interval is one upstream call seen by the in-process simulator.
type Interval struct {
	Start, End time.Duration
	Status     int
}

// ModeResult is the raw record of one mode's run.
type ModeResult struct {
	Mode     string
	Windowed bool      // through sluice's window and gate: windowed, or a variant
	Start    time.Time // the run's time zero: every *MS field counts from it
	Cap      int       // BATCH_MAX_CONCURRENCY, when windowed; else 0
	MaxWait  time.Duration
	Records  []Record
	Samples  []Sample
	Upstream []Interval // empty with an external upstream
	Sim      sim.Stats
	// InputBucketSize is the simulator's input-token limit a minute, the
	// size of the bucket Samples' InputBucket reads; 0 when there is no
	// such limit or the simulator is external (its bucket is not sampled).
	InputBucketSize int
}

// Record is one request, as written to trace.jsonl.
type Record struct {
	Mode         string   `json:"mode"`
	ID           int      `json:"id"`
	Tenant       string   `json:"tenant,omitempty"`  // in a tenants workload
	Session      int      `json:"session,omitempty"` // with turns: the session, and the request's turn in it
	Turn         int      `json:"turn,omitempty"`
	Stream       bool     `json:"stream"`
	PromptTokens int      `json:"prompt_tokens"`
	OutputTokens int      `json:"output_tokens"`
	ArrivalMS    float64  `json:"arrival_ms"`
	SlotMS       *float64 `json:"slot_ms,omitempty"` // start of the last attempt's upstream call
	FirstByteMS  *float64 `json:"first_byte_ms,omitempty"`
	FirstTokenMS *float64 `json:"first_token_ms,omitempty"`
	DoneMS       float64  `json:"done_ms"`
	Outcome      string   `json:"outcome"` // ok, error or lost
	ErrorType    string   `json:"error_type,omitempty"`
	Status       int      `json:"status"`
	Retries      int      `json:"retries"`
	CacheWrite   int      `json:"cache_write_tokens,omitempty"`
	CacheRead    int      `json:"cache_read_tokens,omitempty"`
}

// Run sends the scenario's workload through each mode in turn.
func Run(ctx context.Context, opt Options) (*Report, error) {
	sc := opt.Scenario
	if sc == nil {
		return nil, errors.New("bench: no scenario")
	}
	modes := opt.Modes
	if len(modes) == 0 {
		modes = sc.DefaultModes()
	}
	for _, m := range modes {
		if m != ModeDirect && m != ModePlain && m != ModeBulk && !sc.Windowed(m) {
			want := "direct, plain, windowed or bulk"
			for _, v := range sc.Variants {
				want += ", " + v.Name
			}
			return nil, fmt.Errorf("bench: unknown mode %q (want %s)", m, want)
		}
	}
	n := max(opt.Repeat, 1)
	var rep *Report
	for i := range n {
		// A copy per seed: the seed drives the arrivals, the simulator's
		// jitter and the client's retry jitter alike.
		run := *sc
		run.Seed = sc.Seed + int64(i)
		arrivals, err := run.Arrivals()
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		var results []*ModeResult
		for _, m := range modes {
			label := m
			if n > 1 {
				label = fmt.Sprintf("%s %d/%d", m, i+1, n)
			}
			r, err := runMode(ctx, &run, m, label, arrivals, opt)
			if err != nil {
				return nil, fmt.Errorf("mode %s: %w", label, err)
			}
			results = append(results, r)
		}
		this := newReport(&run, results)
		if rep == nil {
			rep = this
		}
		if n > 1 {
			rep.Repeats = append(rep.Repeats, RunReport{Seed: run.Seed, Arrivals: this.Arrivals, Modes: this.Modes})
		}
	}
	rep.summarize()
	return rep, nil
}

// upstreamLog records each upstream call the in-process simulator serves.
type upstreamLog struct {
	start time.Time
	mu    sync.Mutex
	calls map[string]*Interval // by x-bench-attempt
}

func (l *upstreamLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Bench-Attempt")
		if key == "" {
			h.ServeHTTP(w, r)
			return
		}
		// Logged on arrival, so that a client that has read the whole
		// reply before this handler returned still finds its start.
		iv := &Interval{Start: time.Since(l.start), End: -1}
		l.mu.Lock()
		l.calls[key] = iv
		l.mu.Unlock()
		sw := statuswriter.Wrap(w)
		h.ServeHTTP(sw, r)
		end, status := time.Since(l.start), sw.Status()
		if status == 0 {
			status = http.StatusOK
		}
		l.mu.Lock()
		iv.End, iv.Status = end, status
		l.mu.Unlock()
	})
}

// upstreamStats reads the simulator's counters, in-process or over HTTP.
type upstreamStats func() (sim.Stats, error)

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
	if mode != ModeDirect {
		cfg := sc.ModeConfig(mode)
		u, err := url.Parse(upURL)
		if err != nil {
			return nil, fmt.Errorf("upstream URL: %w", err)
		}
		cfg.UpstreamURL = u
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
		parts, err := assemble.Build(cfg, assemble.Env{Log: popt.Logger}) // as sluice serve builds them
		if err != nil {
			return nil, err
		}
		popt.Parts = *parts
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

// settledStats reads the simulator's counters once no call is left in
// generation (for up to a second): a client may have read a stream's last
// event before the simulator's handler counted the stream's tokens.
func settledStats(stats upstreamStats) (sim.Stats, error) {
	deadline := time.Now().Add(time.Second)
	for {
		st, err := stats()
		if err != nil || st.Inflight == 0 || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(5 * time.Millisecond)
	}
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

func simReset(ctx context.Context, hc *http.Client, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/sim/reset", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reset the upstream simulator: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reset the upstream simulator: POST /sim/reset answered %s (is --upstream a `sluice sim`?)", resp.Status)
	}
	return nil
}

func simStats(ctx context.Context, hc *http.Client, base string) (sim.Stats, error) {
	var st sim.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sim/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return st, fmt.Errorf("read upstream stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("read upstream stats: %w", err)
	}
	return st, nil
}
