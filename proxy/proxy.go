// Package proxy is sluice's HTTP face: it routes requests, enforces body
// limits, sends POST /v1/messages along its spine (messages.go: through
// the windowed scheduler, or straight upstream when windowing is off),
// relays JSON and SSE responses, and turns every failure of its own into
// an Anthropic-shaped error (answers.go, package apierror). It builds no
// policy: it is handed them, built from the configuration by package
// assemble (Options.Parts).
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/cachewhy"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/keystore"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/park"
	"github.com/sluicehq/sluice/parts"
	recording "github.com/sluicehq/sluice/record"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/retry"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/upstream"
)

// Body limits, as the API documents them.
const (
	maxMessagesBody = 32 << 20  // Messages and everything else
	maxBatchesBody  = 256 << 20 // Message Batches create
	// maxResponseBody bounds a buffered (non-streaming) Messages response. A
	// real one is at most a few MB; past this the upstream is misbehaving.
	maxResponseBody = 64 << 20
)

// Proxy is the sluice HTTP handler.
type Proxy struct {
	cfg   config.Config
	up    *upstream.Client
	gate  gate.Gate           // nil when windowing is off
	sched *dispatch.Scheduler // nil when windowing is off
	log   *slog.Logger
	mux   *http.ServeMux
	obs   Observer // nil: nobody watching
	// inbound holds the sluice keys and the upstream key when
	// INBOUND_KEYS_FILE is set (see inbound.go); nil otherwise.
	inbound *Inbound
	// tracer makes the request's spans (see tracing.go); nil when tracing
	// is off, and then no tracing work is done.
	tracer trace.Tracer

	// parker parks windowed requests whose connections came through
	// Listener, once parkWhen requests are waiting; others wait in place.
	parker   *park.Parker
	parkWhen int
	// batchHolds are the budget holds of Message Batches created through
	// this sluice, until their results are read (batchbudget.go).
	batchHolds batchHolds

	// tenants names each Messages request's tenant and class, and on the
	// windowed path counts and limits them (see package dispatch/tenants).
	tenants dispatch.Tenants

	budget  *retry.Budget // shared by all windowed requests
	metrics *metrics.Metrics
	// The children of the vectors every request counts in, looked up
	// once each (see children).
	requestCounts     children[requestLabels, prometheus.Counter]
	upstreamDurations children[string, prometheus.Observer]
	tokenCounts       children[tokenLabels, prometheus.Counter]
	tokenModels       modelLabels   // sluice_tokens_total's model values, bounded
	spend             *spend.Ledger // what each tenant, key and model spent (spend.go)
	budgets           *budget.Set   // the [[budgets]]; nil without any (budget.go)
	books             Books         // the spend books the admin API reads (adminapi.go); nil: none
	// keys are the keys store the admin API changes (adminkeys.go;
	// INBOUND_KEYS_STORE), and keysChanged puts a change in force here
	// at once; nil: none.
	keys        keystore.Store
	keysChanged func()
	// pacer is the latest wait the upstream asked for: fed by every 429
	// (and under RATE_LIMIT_PACING=reset by every windowed answer, whose
	// calls it holds, see dispatch.RateLimitHold); it gives the 429s
	// sluice makes their retry-after (see rateLimited).
	pacer *pace.Pacer
	// buckets paces each upstream key by its rate-limit buckets
	// (RATE_LIMIT_PACING=buckets); nil otherwise.
	buckets keyPacing
	// cache is the cache-aware release (CACHE_AWARE), for its gauges; nil
	// otherwise.
	cache cacheCounts
	// routes are the config file's backends and their keys, and router
	// the policy that picks among them (see routing.go); nil without
	// backends: every call goes to up.
	routes *route.Pool
	router route.Router
	// recorder records the shape of each Messages request (RECORD_FILE);
	// nil otherwise.
	recorder *recording.Recorder
	// why explains each cache write (see cachewhy.go).
	why cachewhy.Index
	// lastRateLimited is when the upstream last answered 429, in Unix
	// nanoseconds.
	lastRateLimited atomic.Int64
	rand            func() float64 // backoff jitter; tests fix it

	bodies      *byteQuota // BODY_BUDGET_MB, over the bodies of Messages requests
	streamBytes *byteQuota // streamBufferQuota, over the events held for slow stream readers
	// bodyTimeout and batchBodyTimeout bound how long a request body may
	// take to arrive.
	bodyTimeout, batchBodyTimeout time.Duration
	// pendingConns counts connections and Messages bodies not yet
	// arrived whole, against MAX_PENDING_CONNS (see Server).
	pendingConns *pendingCount
	// publicBase is the scheme, host and path prefix clients reach sluice
	// at (PUBLIC_URL), for the results_url of batches.
	publicBase string

	// serving is every Messages request being served, which Abort cuts
	// with errShuttingDown; active counts them.
	serving servingSet
	active  atomic.Int64
	// draining is set when shutdown is signalled (Server.Serve), before
	// the drain: from then on /readyz answers 503, so that a load balancer
	// sends new requests elsewhere before sluice stops accepting them.
	draining atomic.Bool
}

// keyPacing is what the request path asks of the pacing by upstream key
// (buckets.Pacing): to pace; how long it held a member, for the
// access line; for a request whose wait ran out, whether its key's line
// held it and until when (see rateLimited); and the buckets' levels for
// the metrics.
type keyPacing interface {
	dispatch.Pacing
	Waited(m *dispatch.Member) time.Duration
	Holds(r *request.Descriptor) bool
	HeldUntil(r *request.Descriptor) time.Time
	Levels(now time.Time) []pace.Level
}

// cacheCounts is what the metrics read of the cache-aware release
// (cacheaware.Release).
type cacheCounts interface {
	Held() int
	Distrusted() int
}

// Options are what a Proxy is made of besides its configuration: its
// policies (Parts, required) and the optional parts.
type Options struct {
	// Spend is the ledger spend is counted in; if nil, NewSpend(cfg).
	Spend *spend.Ledger
	// Books are the spend books the admin API reads (/admin/spend); nil:
	// none. Their maker tells them the ledger's spend.
	Books Books
	// Keys, if set, is the keys store the admin API creates, changes and
	// revokes keys and budgets in (INBOUND_KEYS_STORE); KeysChanged is
	// called after each change, before its answer, to put it in force on
	// this replica at once (keystore.Sync.Now). Every replica reads the store itself.
	Keys        keystore.Store
	KeysChanged func()
	// Logger receives one access line per request, and failures. If nil,
	// slog.Default().
	Logger *slog.Logger
	// Upstream is the client to forward with. If nil, one is built for
	// cfg.UpstreamURL.
	Upstream *upstream.Client
	// Observer, if set, hears of every wave and every Messages exchange
	// (see observe.go). If nil, the request path does no observing at all.
	Observer Observer
	// TracerProvider, if set, traces every request but the probes and
	// scrapes (see tracing.go and docs/tracing.md). If nil, the request
	// path does no tracing at all.
	TracerProvider trace.TracerProvider
	// IdleTimeout is how long a parked connection may stay idle after its
	// answer, awaiting the client's next request; set it to the
	// http.Server's IdleTimeout. If zero, two minutes.
	IdleTimeout time.Duration
	// ParkWhenQueued is how many requests must already be waiting (in
	// windows or for a slot) for a new windowed request to be parked (see
	// Listener) rather than wait in place. Parking costs some work (the
	// connection is taken over, and handed back for the next request) and
	// saves memory only on a request that waits long; one that finds at
	// least BATCH_MAX_CONCURRENCY requests ahead of it will, as a rule,
	// wait about a whole upstream call (those ahead may still be in an
	// open window). If zero, BATCH_MAX_CONCURRENCY; if negative, every
	// windowed request is parked.
	ParkWhenQueued int
	// BodyReadTimeout is how long a request body may take to arrive. If
	// zero, 60 s (5 minutes for a Message Batches create).
	BodyReadTimeout time.Duration

	// Parts are the policies: the gate, the admission chain, the pacing,
	// the releaser, the tenant policy, the retry budget and the metrics
	// they count in, as assemble.Build makes them from the configuration
	// (a test may put a part of another kind in their place). Required:
	// the proxy builds no policy itself.
	Parts parts.Parts
	// Collectors are more metrics to serve at /metrics: a shared gate's,
	// the bulk endpoint's.
	Collectors []prometheus.Collector
	// Inbound, if set, makes sluice hold the upstream key and take sluice
	// keys from its clients (see inbound.go and LoadInbound). If nil, each
	// client's own key passes through.
	Inbound *Inbound

	// Bulk, if set, serves /v1/bulk/ (the async bulk endpoint, package
	// bulk).
	Bulk http.Handler

	// Recorder, if set, is given the shape of every Messages request
	// (RECORD_FILE, package record); its metrics are served too. The
	// caller closes it once the proxy has drained.
	Recorder *recording.Recorder
}

// New builds a proxy for cfg, of the parts in opt.
func New(cfg config.Config, opt Options) (*Proxy, error) {
	if cfg.UpstreamURL == nil && opt.Upstream == nil {
		return nil, errors.New("proxy: no upstream URL")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	parts := opt.Parts
	if parts.Metrics == nil || parts.Tenants == nil || parts.RetryBudget == nil || parts.Pacer == nil ||
		cfg.Enabled && (parts.Gate == nil || parts.Admission == nil) {
		return nil, errors.New("proxy: Options.Parts is missing a part: build them from the configuration with assemble.Build")
	}
	p := &Proxy{cfg: cfg, up: opt.Upstream, log: opt.Logger, obs: opt.Observer, rand: rand.Float64, parker: park.New(opt.IdleTimeout),
		budget: parts.RetryBudget, pacer: parts.Pacer, tenants: parts.Tenants, metrics: parts.Metrics,
		inbound: opt.Inbound, recorder: opt.Recorder, spend: opt.Spend, budgets: parts.Budgets, books: opt.Books,
		keys: opt.Keys, keysChanged: opt.KeysChanged}
	if p.spend == nil {
		p.spend = NewSpend(cfg)
		p.spend.Tell(p.budgets) // a ledger given in Options is told by its maker
		if p.books != nil {
			p.spend.Tell(p.books)
		}
	}
	if parts.Buckets != nil { // not a nil *buckets.Pacing in the interface
		p.buckets = parts.Buckets
	}
	if parts.Cache != nil {
		p.cache = parts.Cache
	}
	if parts.Routes != nil {
		p.routes, p.router = parts.Routes, parts.Router
		opt.Collectors = append(slices.Clip(opt.Collectors), p.routes)
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if opt.TracerProvider != nil {
		p.tracer = opt.TracerProvider.Tracer(instrumentationName)
	}
	p.bodies = &byteQuota{limit: cfg.BodyBudget, drain: p.drainWait}
	p.streamBytes = &byteQuota{limit: streamBufferQuota}
	p.pendingConns = &pendingCount{}
	p.bodyTimeout, p.batchBodyTimeout = bodyReadTimeout, batchBodyReadTimeout
	if opt.BodyReadTimeout > 0 {
		p.bodyTimeout, p.batchBodyTimeout = opt.BodyReadTimeout, opt.BodyReadTimeout
	}
	p.publicBase = publicBase(cfg)
	if p.up == nil {
		p.up = upstream.New(cfg.UpstreamURL, upstream.Options{IdleConnsPerHost: cfg.MaxConcurrency})
	}
	p.parkWhen = opt.ParkWhenQueued
	if p.parkWhen == 0 {
		p.parkWhen = cfg.MaxConcurrency
	}
	p.metrics.Watch(metrics.State{
		Queued:    p.Queued,
		InFlight:  func() int { return p.GateStats().InFlight },
		Capacity:  func() int { return p.GateStats().Capacity },
		Parked:    func() int { return p.parker.Parked() },
		BodyBytes: func() int { return int(p.bodies.Held()) },
		Pending:   func() int { return int(p.pendingConns.n.Load()) },
		Buckets:   p.RateLimitBuckets,
		CacheHeld: func() int {
			if p.cache == nil {
				return 0
			}
			return p.cache.Held()
		},
		CacheDistrusted: func() int {
			if p.cache == nil {
				return 0
			}
			return p.cache.Distrusted()
		},
		// The setting, not the admission chain: a test's Admission may
		// bound the queue differently, but assemble builds QueueBound.
		QueueCapacity: func() int {
			if !cfg.Enabled {
				return 0
			}
			return cfg.MaxQueue
		},
		BodyBudget: func() int { return int(p.bodies.limit) },
		Tenants:    p.tenantCounts,
		Spend:      p.spend.Rows,
	})
	if opt.Recorder != nil {
		opt.Collectors = append(slices.Clip(opt.Collectors), opt.Recorder.Collectors()...)
	}
	if p.budgets != nil {
		opt.Collectors = append(slices.Clip(opt.Collectors), p.budgets)
	}
	for _, c := range opt.Collectors {
		if err := p.metrics.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
	}
	if cfg.Enabled {
		var pacing dispatch.Pacing // nil, not a nil keyPacing: no pacing
		if p.buckets != nil {
			pacing = p.buckets
		}
		var routing dispatch.Routing // nil, not a nil *route.Scheduling: no routing
		if p.routes != nil {
			routing = &route.Scheduling{Pool: p.routes, Router: p.router}
		}
		s, err := dispatch.New(dispatch.Config{MaxSize: cfg.MaxSize, MaxWait: cfg.MaxWait, Timeout: cfg.Timeout,
			IdleRelease: cfg.IdleRelease, Admission: parts.Admission, Releaser: parts.Releaser, Pacing: pacing, Tenants: p.tenants, Routing: routing, Learners: parts.Learners}, parts.Gate, p.dispatchHooks(p.obs))
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		p.gate, p.sched = parts.Gate, s
	}
	p.mux = http.NewServeMux()
	p.mux.HandleFunc("/healthz", p.healthz)
	p.mux.HandleFunc("/readyz", p.readyz)
	// The API serves nothing at /; a person who opens sluice's address in
	// a browser is told what it is instead.
	p.mux.HandleFunc("GET /{$}", p.root)
	switch {
	case p.split(): // on the admin listener instead (see admin.go)
		p.mux.HandleFunc("/metrics", adminOnly)
		p.mux.HandleFunc("/ui", adminOnly)
		p.mux.HandleFunc("/ui/", adminOnly)
	case cfg.MetricsEnabled:
		p.mux.Handle("GET /metrics", p.metrics.Handler())
	}
	p.mux.HandleFunc("/admin/", adminOnly) // the admin API: never on the API port (adminapi.go)
	p.mux.Handle("/v1/messages", p.RequireKey(http.HandlerFunc(p.messages)))
	if opt.Bulk != nil {
		p.mux.Handle("/v1/bulk/", p.RequireKey(p.bulkBody(opt.Bulk)))
	}
	p.mux.Handle("/", p.RequireKey(http.HandlerFunc(p.relay)))
	return p, nil
}

// Flush releases any open window at once, and every windowed request after
// it without waiting for a window; the server calls it when shutdown begins
// so that no request accepted before the signal waits out
// BATCH_MAX_WAIT_MS.
func (p *Proxy) Flush() {
	if p.sched != nil {
		p.sched.Drain()
	}
}

// Listener wraps ln, the listener of the http.Server that serves p, so
// that windowed requests arriving through it are parked while they wait:
// a waiting request then holds a few KB instead of net/http's connection
// goroutine and buffers (see package park). Requests through other
// listeners are served all the same, waiting in place.
func (p *Proxy) Listener(ln net.Listener) net.Listener { return p.parker.Listener(ln) }

// Shutdown waits for the answers of parked requests, which the
// http.Server's own Shutdown does not see, until ctx ends, and then cuts
// them; call it alongside the server's Shutdown, after Flush. Idle parked
// connections are closed at once.
func (p *Proxy) Shutdown(ctx context.Context) error { return p.parker.Shutdown(ctx) }

// Close releases the open window, refuses new windowed requests, and closes
// idle upstream connections. Call it after the HTTP server has drained.
func (p *Proxy) Close() {
	if p.sched != nil {
		p.sched.Close()
	}
	p.up.CloseIdleConnections()
}

// writeProbe answers a GET or HEAD probe with body, never cached.
func writeProbe(w http.ResponseWriter, r *http.Request, status int, body string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		apierror.WriteSluice(w, errMethod("GET"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write([]byte(body + "\n"))
}

// docsURL is where sluice's documentation lives.
const docsURL = "https://github.com/sluicehq/sluice#readme"

// since is time.Since, kept in one place for the log lines.
func since(t time.Time) time.Duration { return time.Since(t).Round(time.Microsecond) }

// publicBase is PUBLIC_URL, or http:// (https:// with TLS) and the listen
// address: never a request's Host header, which a client may set to
// anything and which the SDKs would then send their API key to. An unspecified listen host
// (":8080", "0.0.0.0:8080") is read as loopback; sluice serve warns that
// PUBLIC_URL should be set then.
func publicBase(cfg config.Config) string {
	if cfg.PublicURL != nil {
		return strings.TrimSuffix(cfg.PublicURL.String(), "/")
	}
	host, port, err := net.SplitHostPort(cfg.ListenAddr)
	if err != nil {
		return "http://127.0.0.1"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	scheme := "http"
	if cfg.TLSCertFile != "" {
		scheme = "https"
	}
	return (&url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port)}).String()
}
