package route

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// counts are one key's counters, read by the metrics.
type counts struct {
	routed     [OnlyOne + 1]atomic.Uint64 // by why
	failedOver atomic.Uint64              // requests that left it for another key
	failures   atomic.Uint64              // 529s, 5xx and unreachable
	rateLimits atomic.Uint64              // 429s
	cacheRead  atomic.Uint64              // input tokens read from its cache
}

// Answered tells the pool of an answer on k with status (0: none came)
// and the input tokens it read from the cache: its health, and its
// counts.
func (p *Pool) Answered(k *Key, status int, now time.Time) {
	if status == 429 {
		k.count.rateLimits.Add(1)
	}
	p.Result(k, OutcomeOf(status), now)
}

// CacheRead counts n input tokens read from k's cache.
func (p *Pool) CacheRead(k *Key, n int64) {
	if n > 0 {
		k.count.cacheRead.Add(uint64(n))
	}
}

var (
	routedDesc = prometheus.NewDesc("sluice_route_requests_total",
		"Requests routed to each backend key, by what decided it (affinity, session, room, turn, only); a retry routed again counts again.",
		[]string{"backend", "key", "why"}, nil)
	failoverDesc = prometheus.NewDesc("sluice_route_failovers_total",
		"Requests that left a backend key for another after it failed them (529, 5xx, no connection) or held them, before anything reached the client.",
		[]string{"backend", "key"}, nil)
	failuresDesc = prometheus.NewDesc("sluice_backend_failures_total",
		"Upstream calls on a backend key that failed: 529, another 5xx, 401, no answer, or no response headers within its bound.",
		[]string{"backend", "key"}, nil)
	rateLimitDesc = prometheus.NewDesc("sluice_backend_rate_limited_total",
		"429 answers from a backend key.",
		[]string{"backend", "key"}, nil)
	cacheReadDesc = prometheus.NewDesc("sluice_backend_cache_read_tokens_total",
		"Input tokens answers on a backend key read from its prompt cache.",
		[]string{"backend", "key"}, nil)
	pendingDesc = prometheus.NewDesc("sluice_backend_pending",
		"Requests routed to a backend key and not yet done: waiting for its rate limits or a slot, or in flight.",
		[]string{"backend", "key"}, nil)
	healthyDesc = prometheus.NewDesc("sluice_backend_healthy",
		"1 while a backend key is tried, 0 while it is skipped after failures.",
		[]string{"backend", "key"}, nil)
	firstByteDesc = prometheus.NewDesc("sluice_backend_first_byte_bound_seconds",
		"How long a call of the usual size on a backend key waits for its response headers before the key counts as failing, as learnt from its answers (four times their p99 time to first byte, at least the floor), by kind (stream, whole); absent while too few answers are known. UPSTREAM_TIMEOUT_S caps it.",
		[]string{"backend", "key", "kind"}, nil)
)

// Describe is prometheus.Collector's.
func (p *Pool) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{routedDesc, failoverDesc, failuresDesc, rateLimitDesc, cacheReadDesc, pendingDesc, healthyDesc, firstByteDesc} {
		ch <- d
	}
}

// Collect is prometheus.Collector's. The labels are the backend's name
// and the key's place: never the key.
func (p *Pool) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, k := range p.Keys {
		b, n := k.Backend.Name, k.Name
		for why := range k.count.routed {
			ch <- prometheus.MustNewConstMetric(routedDesc, prometheus.CounterValue, float64(k.count.routed[why].Load()), b, n, Why(why).String())
		}
		ch <- prometheus.MustNewConstMetric(failoverDesc, prometheus.CounterValue, float64(k.count.failedOver.Load()), b, n)
		ch <- prometheus.MustNewConstMetric(failuresDesc, prometheus.CounterValue, float64(k.count.failures.Load()), b, n)
		ch <- prometheus.MustNewConstMetric(rateLimitDesc, prometheus.CounterValue, float64(k.count.rateLimits.Load()), b, n)
		ch <- prometheus.MustNewConstMetric(cacheReadDesc, prometheus.CounterValue, float64(k.count.cacheRead.Load()), b, n)
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(k.pending.Load()), b, n)
		healthy := 0.0
		if k.Healthy(now) {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, healthy, b, n)
		for _, kind := range [...]string{"whole", "stream"} {
			if d, ok := p.FirstByteBound(k, kind == "stream", 0); ok {
				ch <- prometheus.MustNewConstMetric(firstByteDesc, prometheus.GaugeValue, d.Seconds(), b, n, kind)
			}
		}
	}
}

// Row is one key as the page's backends table shows it.
type Row struct {
	Backend         string `json:"backend"`
	Key             string `json:"key"` // its name: never the key
	Pending         int    `json:"pending"`
	Cap             int    `json:"cap"`
	Healthy         bool   `json:"healthy"`
	Routed          uint64 `json:"routed"`
	ByAffinity      uint64 `json:"by_affinity"`
	BySession       uint64 `json:"by_session"`
	FailedOver      uint64 `json:"failed_over"`
	Failures        uint64 `json:"failures"`
	RateLimited     uint64 `json:"rate_limited"`
	CacheReadTokens uint64 `json:"cache_read_tokens"`
}

// Rows are the keys' rows, in the config file's order.
func (p *Pool) Rows() []Row {
	now := time.Now()
	out := make([]Row, 0, len(p.Keys))
	for _, k := range p.Keys {
		r := Row{Backend: k.Backend.Name, Key: k.Name, Pending: k.Pending(), Cap: k.Backend.Cap, Healthy: k.Healthy(now),
			ByAffinity: k.count.routed[ByAffinity].Load(), BySession: k.count.routed[BySession].Load(),
			FailedOver: k.count.failedOver.Load(), Failures: k.count.failures.Load(), RateLimited: k.count.rateLimits.Load(),
			CacheReadTokens: k.count.cacheRead.Load()}
		for i := range k.count.routed {
			r.Routed += k.count.routed[i].Load()
		}
		out = append(out, r)
	}
	return out
}
