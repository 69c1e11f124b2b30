// Package metrics holds sluice's Prometheus metrics, on a registry of their
// own (no globals), and serves them at /metrics. docs/metrics.md documents
// each one.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/spend"
)

// State reports the live gauges on each scrape.
type State struct {
	Queued   func() int // requests waiting in open windows or for a slot
	InFlight func() int // gate slots held
	Capacity func() int // gate slots in all
	Parked   func() int // client connections parked
	// BodyBytes is the bytes of request bodies held (BODY_BUDGET_MB);
	// Pending the connections and bodies not yet arrived whole
	// (MAX_PENDING_CONNS).
	BodyBytes func() int
	Pending   func() int
	// QueueCapacity is BATCH_MAX_QUEUE (0 when nothing windowed is
	// queued), BodyBudget BODY_BUDGET_MB in bytes: served so that an alert
	// can compare the gauges above with their bounds without repeating
	// the settings in its expression.
	QueueCapacity func() int
	BodyBudget    func() int
	// Tenants reports each tracked tenant's counts (see tenants.go); nil
	// or empty: no tenant series.
	Tenants func() []TenantCounts
	// Buckets is the estimated rate-limit buckets of each upstream key
	// (RATE_LIMIT_PACING=buckets); nil when there are none.
	Buckets func() []Bucket
	// CacheHeld is the followers CACHE_AWARE holds now for their leaders.
	CacheHeld func() int
	// CacheDistrusted is the prefixes CACHE_AWARE does not hold on now.
	CacheDistrusted func() int
	// Spend is the spend ledger's rows (see spend.go); nil: no spend series.
	Spend func() []spend.Row
}

// Bucket is one upstream key's estimated rate-limit bucket.
type Bucket struct {
	Key   string  `json:"key"`   // the key's short hash, never the key
	Limit string  `json:"limit"` // requests, input-tokens, output-tokens or tokens
	Size  float64 `json:"size"`
	Level float64 `json:"level"`
}

// Metrics are sluice's collectors. Every field is ready to use after New.
type Metrics struct {
	Registry *prometheus.Registry

	Requests         *prometheus.CounterVec   // route, status, mode
	Flushes          *prometheus.CounterVec   // reason
	WaveSize         prometheus.Histogram     // members per wave
	SlotWait         prometheus.Histogram     // seconds from flush to slot
	QueueWait        prometheus.Histogram     // seconds from arrival to slot
	UpstreamDuration *prometheus.HistogramVec // stream; whole exchange
	UpstreamTTFB     prometheus.Histogram     // seconds to response headers
	InvalidJSON      prometheus.Counter       // 200 answers whose body was not JSON, answered 502
	KeyRefused       prometheus.Counter       // upstream 401s to a key sluice holds, answered 502
	Retries          *prometheus.CounterVec   // cause
	RetryBudgetSpent prometheus.Counter
	Shed             prometheus.Counter
	Deadlines        prometheus.Counter
	Departed         prometheus.Counter
	ClientStalls     prometheus.Counter       // stream clients cut for their reading (STREAM_CLIENT_STALL_S, STREAM_IDLE_TIMEOUT_S)
	IdleConnsClosed  prometheus.Counter       // idle keep-alive connections closed to admit a new one
	Tokens           *prometheus.CounterVec   // model, kind
	CacheGroups      prometheus.Counter       // leaders that got a held follower
	CacheRequests    *prometheus.CounterVec   // role: leader, follower, warm
	CacheHold        *prometheus.HistogramVec // released; seconds a follower was held
	CacheSavings     prometheus.Counter       // USD at list prices
	CacheMissBlock   *prometheus.CounterVec   // block: cache writes by the first block that differs
	CacheMissTokens  *prometheus.CounterVec   // block: tokens those writes could have read
	CacheDistrusted  *prometheus.CounterVec   // event: distrusted, trusted
	BucketWait       prometheus.Histogram     // seconds a request was held for its key's rate limits
	GateLimitChanges *prometheus.CounterVec   // direction: up, down (GATE_LIMIT=adaptive)
}

// New registers sluice's counters and histograms on a fresh registry; the
// gauges follow with Watch. The two steps let the policies that count in
// the metrics be built before the proxy whose state the gauges read.
func New() *Metrics {
	r := prometheus.NewRegistry()
	f := func(c prometheus.Collector) { r.MustRegister(c) }
	m := &Metrics{Registry: r}
	m.Requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_requests_total",
		Help: "Requests answered, by route (messages, relay, healthz, readyz, root, metrics), status code and mode (windowed, plain)."},
		[]string{"route", "status", "mode"})
	m.Flushes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_window_flushes_total",
		Help: "Windows closed, by reason (size, age, flush, idle)."}, []string{"reason"})
	m.WaveSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_wave_size_requests",
		Help: "Requests per closed window.", Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}})
	m.SlotWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_slot_wait_seconds",
		Help: "Time from a request's window flush until it held a gate slot.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)})
	m.QueueWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_queue_wait_seconds",
		Help: "Time from a request's arrival until it held a gate slot (window plus slot wait).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)})
	m.UpstreamDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_upstream_duration_seconds",
		Help:    "Upstream exchange time, all attempts, until the whole response (stream=false) or the stream's end (stream=true).",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}, []string{"stream"})
	m.UpstreamTTFB = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_upstream_ttfb_seconds",
		Help: "Time from sending an upstream attempt to its response headers.", Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)})
	m.InvalidJSON = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_upstream_invalid_json_total",
		Help: "Upstream 200 answers to a non-streaming Messages request whose body was not valid JSON; each was answered 502 api_error instead."})
	m.KeyRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_upstream_key_refused_total",
		Help: "Upstream 401s to an API key sluice holds (inbound keys, or a backend's key); each was answered 502 api_error, since the client's own key was not the one refused."})
	m.Retries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_retries_total",
		Help: "Upstream attempts retried in place, by cause (the status code, or connection)."}, []string{"cause"})
	m.RetryBudgetSpent = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_retry_budget_exhausted_total",
		Help: "Retries not made because the retry budget was spent."})
	m.Shed = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_shed_requests_total",
		Help: "Requests answered 429 at once: BATCH_MAX_QUEUE requests were waiting, the expected wait exceeded the client's x-stainless-timeout, the body would pass BODY_BUDGET_MB, or MAX_PENDING_CONNS was reached."})
	m.Deadlines = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_deadline_timeouts_total",
		Help: "Requests cut at their wave deadline (BATCH_TIMEOUT_S)."})
	m.Departed = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_departed_clients_total",
		Help: "Windowed requests whose client hung up before the answer."})
	m.ClientStalls = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_stream_client_stalls_total",
		Help: "Streams whose client sluice cut for its reading: it took no bytes for STREAM_CLIENT_STALL_S while the upstream waited on it (the slot given back), or for STREAM_IDLE_TIMEOUT_S while sluice had bytes for it."})
	m.IdleConnsClosed = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_idle_connections_closed_total",
		Help: "Idle keep-alive connections closed to admit a new connection at MAX_PENDING_CONNS."})
	m.Tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_tokens_total",
		Help: "Tokens reported in responses' usage, by model and kind (input, output, cache_write, cache_read)."},
		[]string{"model", "kind"})
	m.CacheGroups = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cache_groups_total",
		Help: "Groups formed by CACHE_AWARE: a request writing a cold prompt prefix got its first follower held for it."})
	m.CacheRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cache_requests_total",
		Help: "Windowed requests with a cacheable prompt prefix, by their role under CACHE_AWARE (leader, follower, warm)."}, []string{"role"})
	m.CacheHold = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sluice_cache_hold_seconds",
		Help:    "Time a follower was held outside the gate for its leader, by why the hold ended (begun, promoted, bound, evicted).",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 11)}, []string{"released"})
	m.CacheSavings = prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_cache_savings_usd_total",
		Help: "Estimated USD saved at list prices by CACHE_AWARE: each follower's cache read tokens, priced as the write it would have made without its hold less the read it made."})
	m.CacheMissBlock = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cache_miss_block_total",
		Help: "Answers that wrote to the prompt cache, by the first block of their prompt that differs from the recent prompt sharing the most leading blocks (tools[3], system[0], messages[>=8]), or new, same or appended."}, []string{"block"})
	m.CacheMissTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cache_miss_tokens_total",
		Help: "Estimated tokens those writes could have read: the run of leading blocks shared with the recent prompt, less what the answer read, by the same block label."}, []string{"block"})
	m.CacheDistrusted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_cache_distrust_total",
		Help: "CACHE_AWARE's prefixes it stopped holding on after their followers read none of them (event=distrusted), or held on again once seen read (event=trusted)."}, []string{"event"})
	m.BucketWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sluice_ratelimit_wait_seconds",
		Help:    "Time a held request waited outside the gate for its upstream key's rate-limit buckets to hold its cost (RATE_LIMIT_PACING=buckets).",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 13)})
	f(m.BucketWait)
	m.GateLimitChanges = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_gate_limit_changes_total",
		Help: "Changes of the gate's slots by the adaptive limit (GATE_LIMIT=adaptive), by direction (up, down); the limit itself is sluice_gate_capacity_requests."}, []string{"direction"})
	for _, c := range []prometheus.Collector{m.Requests, m.Flushes, m.WaveSize, m.SlotWait, m.QueueWait,
		m.UpstreamDuration, m.UpstreamTTFB, m.InvalidJSON, m.KeyRefused, m.Retries, m.RetryBudgetSpent, m.Shed, m.Deadlines, m.Departed, m.ClientStalls, m.IdleConnsClosed, m.Tokens,
		m.CacheGroups, m.CacheRequests, m.CacheHold, m.CacheSavings, m.CacheMissBlock, m.CacheMissTokens, m.CacheDistrusted,
		m.GateLimitChanges} {
		f(c)
	}
	return m
}

// Watch registers the gauges, read from st on each scrape. Call it once,
// before the registry is first served.
func (m *Metrics) Watch(st State) {
	f := func(c prometheus.Collector) { m.Registry.MustRegister(c) }
	if st.Buckets != nil {
		f(bucketCollector(st.Buckets))
	}
	gauge := func(name, help string, v func() int) {
		if v == nil {
			v = func() int { return 0 }
		}
		f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(v()) }))
	}
	gauge("sluice_queue_depth_requests", "Requests waiting now, in open windows or for a slot.", st.Queued)
	gauge("sluice_gate_in_flight_requests", "Gate slots held now (upstream calls in flight).", st.InFlight)
	gauge("sluice_gate_capacity_requests", "Gate slots in all: BATCH_MAX_CONCURRENCY, or with GATE_LIMIT=adaptive the limit learned now.", st.Capacity)
	gauge("sluice_queue_capacity_requests", "Requests that may wait at once (BATCH_MAX_QUEUE); 0 with BATCH_ENABLED=0.", st.QueueCapacity)
	gauge("sluice_body_budget_held_bytes", "Bytes of Messages request bodies held now, against BODY_BUDGET_MB.", st.BodyBytes)
	gauge("sluice_body_budget_capacity_bytes", "Bytes of Messages request bodies that may be held at once (BODY_BUDGET_MB).", st.BodyBudget)
	gauge("sluice_pending_connections", "Connections and Messages bodies not yet arrived whole, against MAX_PENDING_CONNS.", st.Pending)
	gauge("sluice_cache_followers_held", "Requests CACHE_AWARE holds now outside the gate, waiting for the response of the request writing their prompt prefix to begin.", st.CacheHeld)
	gauge("sluice_cache_distrusted_prefixes", "Prompt prefixes CACHE_AWARE does not hold followers on now, their followers having read none of them.", st.CacheDistrusted)
	gauge("sluice_parked_connections", "Client connections parked now: a windowed request waiting or being answered, a stream being relayed, or idle after its answer until the next request.", st.Parked)
	f(newTenantCollector(st.Tenants))
	if st.Spend != nil {
		f(spendCollector(st.Spend))
	}
	// The runtime's and the process's own: memory, goroutines, file
	// descriptors, which are what overload costs.
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

var (
	bucketLevelDesc = prometheus.NewDesc("sluice_ratelimit_bucket_level",
		"Estimated contents of an upstream key's rate-limit bucket now, by key (a short hash of it) and limit (requests, input-tokens, output-tokens, tokens); at most 256 keys.",
		[]string{"key", "limit"}, nil)
	bucketSizeDesc = prometheus.NewDesc("sluice_ratelimit_bucket_size",
		"Size of an upstream key's rate-limit bucket, as its anthropic-ratelimit-*-limit header says, by key and limit.",
		[]string{"key", "limit"}, nil)
)

// bucketCollector reports the buckets read from f on each scrape.
type bucketCollector func() []Bucket

func (bucketCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- bucketLevelDesc
	ch <- bucketSizeDesc
}

func (f bucketCollector) Collect(ch chan<- prometheus.Metric) {
	for _, b := range f() {
		ch <- prometheus.MustNewConstMetric(bucketLevelDesc, prometheus.GaugeValue, b.Level, b.Key, b.Limit)
		ch <- prometheus.MustNewConstMetric(bucketSizeDesc, prometheus.GaugeValue, b.Size, b.Key, b.Limit)
	}
}
