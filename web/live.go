package web

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/cachewhy"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/spend"
)

// Live is a proxy.Observer that keeps the latest waves and requests for the
// live view. With nobody watching, each call is one atomic load. With a
// watcher, each call writes one ring entry under a mutex held for that
// write only: watchers copy under it and do all encoding and network I/O
// outside it, at most liveRate times a second, so a slow watcher misses
// updates (they are coalesced) but never holds up a request.
type Live struct {
	watchers atomic.Int32
	gauges   func() Gauges

	mu       sync.Mutex
	version  uint64
	waves    ring[LiveWave]
	requests ring[LiveRequest]
	nWaves   uint64
	nReqs    uint64
}

// Gauges are the proxy's state at one moment.
type Gauges struct {
	Windowed  bool `json:"windowed"`    // BATCH_ENABLED
	MaxSize   int  `json:"max_size"`    // BATCH_MAX_SIZE
	MaxWaitMS int  `json:"max_wait_ms"` // BATCH_MAX_WAIT_MS
	Slots     int  `json:"slots"`       // the gate's limit now: BATCH_MAX_CONCURRENCY, unless adaptive
	// Adaptive says the limit is learned (GATE_LIMIT=adaptive), up to
	// MaxSlots, BATCH_MAX_CONCURRENCY.
	Adaptive bool `json:"adaptive,omitempty"`
	MaxSlots int  `json:"max_slots,omitempty"`
	InFlight int  `json:"in_flight"` // gate slots held
	Queued   int  `json:"queued"`    // waiting in a window or for a slot
	// Buckets is sluice's estimate of each upstream key's rate-limit
	// buckets (RATE_LIMIT_PACING=buckets), keys by their short hash.
	Buckets []metrics.Bucket `json:"buckets"`
	// Tenants are the tracked tenants' counts (at most TENANT_MAX and
	// other), the busiest liveTenants of them.
	Tenants []dispatch.TenantStats `json:"tenants,omitempty"`
	// Books, when set, says the spend books cannot be written (or read)
	// and budgets are enforced from memory (proxy.BooksNote).
	Books string `json:"books,omitempty"`
	// CacheWrites is why answers wrote to the prompt cache since sluice
	// started, by the first block that differs (see package cachewhy),
	// the most tokens that could have been read first.
	CacheWrites []cachewhy.Stat `json:"cache_writes,omitempty"`
	// Spend is what each tenant spent on each model since sluice started,
	// the liveSpend costliest pairs (see package spend).
	Spend []spend.TenantModel `json:"spend,omitempty"`
	// Backends are the config file's backend keys (see docs/routing.md),
	// by name, never by key: what each holds and how its requests went.
	Backends []route.Row `json:"backends,omitempty"`
}

// GaugesOf reads the gauges of p, which runs with cfg.
func GaugesOf(p *proxy.Proxy, cfg config.Config) func() Gauges {
	return func() Gauges {
		st := p.GateStats()
		g := Gauges{Windowed: cfg.Enabled, MaxSize: cfg.MaxSize, MaxWaitMS: int(cfg.MaxWait.Milliseconds()),
			Slots: st.Capacity, Adaptive: cfg.GateLimit == config.GateLimitAdaptive, MaxSlots: cfg.MaxConcurrency,
			InFlight: st.InFlight, Queued: p.Queued(), Buckets: p.RateLimitBuckets(), Tenants: p.Tenants(),
			CacheWrites: p.CacheWrites(), Spend: p.SpendByTenantModel(liveSpend), Backends: p.Backends()}
		for i := range g.Buckets {
			// Whole tokens: a bucket refilling by fractions of a token
			// between two looks is no news to a watcher.
			g.Buckets[i].Level = math.Round(g.Buckets[i].Level)
		}
		g.Books = p.BooksNote()
		return g
	}
}

// equal reports whether g and o show the same.
func (g Gauges) equal(o Gauges) bool {
	return g.Books == o.Books && g.Windowed == o.Windowed && g.MaxSize == o.MaxSize && g.MaxWaitMS == o.MaxWaitMS && g.Slots == o.Slots &&
		g.Adaptive == o.Adaptive && g.MaxSlots == o.MaxSlots && g.InFlight == o.InFlight && g.Queued == o.Queued && slices.Equal(g.Buckets, o.Buckets) && slices.Equal(g.Tenants, o.Tenants) &&
		slices.Equal(g.CacheWrites, o.CacheWrites) && slices.Equal(g.Spend, o.Spend) && slices.Equal(g.Backends, o.Backends)
}

// LiveWave is one flushed window.
type LiveWave struct {
	ID     uint64 `json:"id"`
	Size   int    `json:"size"`
	Reason string `json:"reason"`
	AtMS   int64  `json:"at_ms"` // Unix milliseconds
}

// LiveRequest is one finished Messages exchange.
type LiveRequest struct {
	Wave        uint64  `json:"wave"`
	Status      int     `json:"status"`
	QueueWaitMS float64 `json:"queue_wait_ms"`
	TotalMS     float64 `json:"total_ms"`
	AtMS        int64   `json:"at_ms"` // Unix milliseconds, when it ended
	// Cache is its role under CACHE_AWARE ("leader", "follower", "warm",
	// or "" for a request without a cacheable prefix); CacheHoldMS how
	// long a follower waited for its leader's response to begin.
	Cache       string  `json:"cache,omitempty"`
	CacheHoldMS float64 `json:"cache_hold_ms,omitempty"`
	Tenant      string  `json:"tenant,omitempty"`
}

const (
	liveWaves    = 24
	liveRequests = 40
	liveRate     = 10 // updates per second, at most, per watcher
	liveTenants  = 10
	liveSpend    = 10
)

// NewLive returns a live view fed by the proxy it is given to as
// proxy.Options.Observer. gauges, read at most liveRate times a second per
// watcher, reports the proxy's state; it may be nil until SetGauges.
func NewLive(gauges func() Gauges) *Live { return &Live{gauges: gauges} }

// SetGauges sets the gauges function; call it before serving.
func (l *Live) SetGauges(gauges func() Gauges) { l.gauges = gauges }

var _ proxy.Observer = (*Live)(nil)

// WaveFlushed records a wave if anyone is watching.
func (l *Live) WaveFlushed(id uint64, size int, reason string) {
	if l.watchers.Load() == 0 {
		return
	}
	w := LiveWave{ID: id, Size: size, Reason: reason, AtMS: time.Now().UnixMilli()}
	l.mu.Lock()
	l.waves.put(w)
	l.nWaves++
	l.version++
	l.mu.Unlock()
}

// RequestDone records an exchange if anyone is watching.
func (l *Live) RequestDone(ex proxy.Exchange) {
	if l.watchers.Load() == 0 {
		return
	}
	r := LiveRequest{Wave: ex.Wave, Status: ex.Status, QueueWaitMS: ms(ex.QueueWait),
		TotalMS: ms(ex.End.Sub(ex.Start)), AtMS: ex.End.UnixMilli(),
		Cache: ex.Cache.Role.String(), CacheHoldMS: ms(ex.Cache.Held), Tenant: ex.Tenant}
	l.mu.Lock()
	l.requests.put(r)
	l.nReqs++
	l.version++
	l.mu.Unlock()
}

// busiest is the n tenants of ts with the most waiting and in flight,
// then the most served, busiest first, leaving out those with nothing at
// all.
func busiest(ts []dispatch.TenantStats, n int) []dispatch.TenantStats {
	ts = slices.DeleteFunc(ts, func(t dispatch.TenantStats) bool { return t.Waiting+t.InFlight == 0 && t.Served+t.Shed == 0 })
	slices.SortStableFunc(ts, func(a, b dispatch.TenantStats) int {
		if c := cmp.Compare(b.Waiting+b.InFlight, a.Waiting+a.InFlight); c != 0 {
			return c
		}
		return cmp.Compare(b.Served, a.Served)
	})
	return ts[:min(len(ts), n)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// liveUpdate is one event of GET /ui/api/live.
type liveUpdate struct {
	NowMS    int64         `json:"now_ms"`
	Gauges   Gauges        `json:"gauges"`
	Waves    []LiveWave    `json:"waves"`    // newest first
	Requests []LiveRequest `json:"requests"` // newest first
	NWaves   uint64        `json:"waves_seen"`
	NReqs    uint64        `json:"requests_seen"`
}

func (l *Live) snapshot() (liveUpdate, uint64) {
	u := liveUpdate{NowMS: time.Now().UnixMilli()}
	if l.gauges != nil {
		u.Gauges = l.gauges()
		u.Gauges.Tenants = busiest(u.Gauges.Tenants, liveTenants)
	}
	l.mu.Lock()
	v := l.version
	u.Waves, u.Requests = l.waves.newestFirst(), l.requests.newestFirst()
	u.Waves = u.Waves[:min(len(u.Waves), liveWaves)]
	u.NWaves, u.NReqs = l.nWaves, l.nReqs
	l.mu.Unlock()
	return u, v
}

// watch counts one more watcher, unless max are watching already.
func (l *Live) watch(max int32) bool {
	for {
		n := l.watchers.Load()
		if n >= max {
			return false
		}
		if l.watchers.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// live serves GET /ui/api/live: server-sent events, one "live" event when
// something changed, at most liveRate a second, and one a second anyway.
func (h *Handler) live(w http.ResponseWriter, r *http.Request) {
	l := h.opt.Live
	if l == nil {
		writeError(w, http.StatusNotFound, "not_found_error", "this sluice has no live view (it runs no proxy)")
		return
	}
	if !l.watch(int32(h.opt.MaxWatchers)) {
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusServiceUnavailable, "overloaded_error",
			"the live view already has its most watchers (LIVE_MAX_WATCHERS="+strconv.Itoa(h.opt.MaxWatchers)+"): close another page showing it, or raise LIVE_MAX_WATCHERS")
		return
	}
	defer l.watchers.Add(-1)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	tick := time.NewTicker(time.Second / liveRate)
	defer tick.Stop()
	var (
		lastV    uint64 = ^uint64(0)
		lastG    Gauges
		lastSent time.Time
		buf      bytes.Buffer
	)
	for {
		u, v := l.snapshot()
		if v != lastV || !u.Gauges.equal(lastG) || time.Since(lastSent) >= time.Second {
			buf.Reset()
			buf.WriteString("event: live\ndata: ")
			json.NewEncoder(&buf).Encode(u) // ends with "\n"
			buf.WriteString("\n")
			rc.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			lastV, lastG, lastSent = v, u.Gauges, time.Now()
		}
		select {
		case <-r.Context().Done():
			return
		case <-h.opt.Context.Done():
			return
		case <-tick.C:
		}
	}
}

// ring keeps the last len(buf) values put.
type ring[T any] struct {
	buf  [liveRequests]T
	n    int // values held
	next int
	size int
}

func (r *ring[T]) put(v T) {
	if r.size == 0 {
		r.size = len(r.buf)
	}
	r.buf[r.next] = v
	r.next = (r.next + 1) % r.size
	r.n = min(r.n+1, r.size)
}

func (r *ring[T]) newestFirst() []T {
	out := make([]T, 0, r.n)
	for i := 1; i <= r.n; i++ {
		out = append(out, r.buf[(r.next-i+r.size)%r.size])
	}
	return out
}
