// Package assemble builds sluice's policies from one validated
// configuration: the gate (its order and its limit, in this process or
// shared), the admission chain, the rate-limit pacing, the releaser, the
// tenant policy and the retry budget. It is the one place that reads the
// configuration's choices; package proxy takes the parts it built
// (proxy.Options.Parts) and builds none itself. The store the replicas
// share under GATE_BACKEND=redis is opened by the caller (cmd/sluice,
// the one package that knows every other) and handed in as a Shared, so
// that neither this package nor proxy imports Redis.
package assemble

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/dispatch/buckets"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/dispatch/tenants"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/parts"
	"github.com/sluicehq/sluice/retry"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/upstream"
)

// Parts are the policies of one proxy, as Build makes them: the type is
// package parts', which proxy takes (proxy.Options.Parts) without
// importing the package that wires it.
type Parts = parts.Parts

// Shared is the store the replicas of a fleet share (GATE_BACKEND=redis):
// a gate's slots, the rate-limit buckets and the cache groups. Each is
// asked for only when the configuration uses it.
type Shared interface {
	Gate(order config.GateOrder, capacity int) (gate.Gate, error)
	Buckets() buckets.Store
	CacheGroups() cacheaware.Share
	// Lane is the shared lane of the backend key named key (route.Key's
	// Name), capped at capacity; Routes carries the routing pool's news.
	Lane(key string, capacity int) (gate.Gate, error)
	Routes() route.Share
}

// Env is what the parts need beyond the configuration.
type Env struct {
	// Log hears the policies' own news (CACHE_AWARE's changes of mind);
	// nil: slog.Default().
	Log *slog.Logger
	// Shared is the fleet's store under GATE_BACKEND=redis with windowing
	// on; nil otherwise.
	Shared Shared
	// Getenv reads the environment variables backend keys are named by
	// (env:NAME); nil: os.Getenv.
	Getenv func(string) string
	// Cloud builds the client of a backend of kind bedrock, vertex or foundry
	// (the caller's, so that this package does not pull in the clouds'
	// libraries); nil: such a backend is refused.
	Cloud func(config.Backend) (upstream.Backend, error)
	// Upstream tunes the clients of anthropic backends (tests give a
	// dialer); the zero value works.
	Upstream upstream.Options
}

// retryFloorPerSecond is the retry budget's floor: on a quiet proxy a few
// failures are always retried, however few requests the share allows.
const retryFloorPerSecond = 10

// Build validates cfg and builds its parts.
func Build(cfg config.Config, env Env) (*Parts, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if env.Log == nil {
		env.Log = slog.Default()
	}
	m := metrics.New()
	var err error
	ps := &Parts{Metrics: m, Pacer: &pace.Pacer{}, RetryBudget: retry.NewBudget(cfg.RetryBudget, retryFloorPerSecond)}
	if cfg.InboundAuth() && cfg.TenantFrom.ClientNames() {
		env.Log.Info("TENANT_FROM="+cfg.TenantFrom.String()+" with inbound keys: the client names each request's tenant, and an inbound key's max_concurrent and max_waiting bind the key as a whole, over every tenant its requests name",
			"tenant_from", cfg.TenantFrom.String())
	}
	if cfg.TenantFrom == config.TenantFromGateway && cfg.InboundKeysFile == "" && !cfg.InboundKeysStore {
		env.Log.Warn("TENANT_FROM=gateway without INBOUND_KEYS_FILE: each request's tenant is the developer its x-claude-gateway-user-* headers name, whoever sends them; let only Anthropic's gateway reach sluice, or give the gateway a sluice key as its upstream's api_key and set INBOUND_KEYS_FILE (docs/claude-code.md, Beside Anthropic's gateway)",
			"tenant_from", cfg.TenantFrom.String())
	}
	newBudgets := budget.New
	if cfg.InboundKeysStore { // the admin API may add budgets later
		newBudgets = budget.NewLive
	}
	if ps.Budgets, err = newBudgets(cfg.Budgets, env.Log); err != nil {
		return nil, err
	}
	ps.Tenants = tenants.New(tenants.Config{From: cfg.TenantFrom.String(), Max: cfg.TenantMax, Weights: cfg.TenantWeights,
		MaxConcurrent: cfg.TenantMaxConcurrent, MaxWaiting: cfg.TenantMaxWaiting})
	var store buckets.Store // the keys' buckets under RATE_LIMIT_PACING=buckets
	if cfg.Enabled && cfg.RateLimitPacing == config.PacingBuckets {
		store = &pace.Buckets{}
		if env.Shared != nil {
			store = env.Shared.Buckets()
		}
	}
	if len(cfg.Backends) > 0 {
		if ps.Routes, ps.Router, err = buildRoutes(cfg, env, store); err != nil {
			return nil, err
		}
	}
	if !cfg.Enabled {
		return ps, nil
	}
	if ps.Gate, err = buildGate(cfg, env.Shared, m); err != nil {
		return nil, err
	}
	if ps.Routes != nil {
		// A lane per key, shared by the fleet as the gate is; and the
		// pool's news (which key holds which prefix, which is failing)
		// told to the other replicas.
		lanes := make([]gate.Gate, len(ps.Routes.Keys))
		for i, k := range ps.Routes.Keys {
			if env.Shared != nil && cfg.GateBackend == config.GateRedis {
				lanes[i], err = env.Shared.Lane(k.Name, k.Backend.Cap)
			} else {
				lanes[i], err = gate.New(gate.Fixed(k.Backend.Cap), nil)
			}
			if err != nil {
				return nil, err
			}
		}
		ps.Gate = gate.NewLanes(ps.Gate, lanes)
		if env.Shared != nil {
			ps.Routes.ShareWith(env.Shared.Routes())
		}
	}
	var chain dispatch.Chain
	if ps.Budgets != nil { // first: a spent budget is refused whatever the queue
		chain = append(chain, dispatch.Budget{Budgets: ps.Budgets})
	}
	if cfg.AdmitByClientTimeout {
		chain = append(chain, dispatch.ClientTimeout{})
	}
	chain = append(chain, dispatch.QueueBound{Max: cfg.MaxQueue})
	switch cfg.RateLimitPacing {
	case config.PacingReset:
		chain = append(chain, dispatch.RateLimitHold{Pacer: ps.Pacer})
	case config.PacingBuckets:
		ps.Buckets = &buckets.Pacing{Buckets: store, Held: func(d time.Duration) { m.BucketWait.Observe(d.Seconds()) }}
	}
	ps.Admission = chain
	// The wave release: each releaser hands the members it lets go to the
	// next (dispatch.Releasers); none, and a wave goes in line at once, in
	// arrival order.
	var release dispatch.Releasers
	if cfg.CacheAware {
		ps.Cache = &cacheaware.Release{LeaderWait: cfg.CacheLeaderWait, Grouped: m.CacheGroups.Inc, Doubted: cacheDoubted(env.Log, m)}
		if env.Shared != nil {
			ps.Cache.Share = env.Shared.CacheGroups()
		}
		release = append(release, ps.Cache)
		ps.Learners = append(ps.Learners, ps.Cache)
	}
	if cfg.ReleaseShortestFirst {
		release = append(release, dispatch.ShortestFirst{})
	}
	switch len(release) {
	case 0:
	case 1:
		ps.Releaser = release[0]
	default:
		ps.Releaser = release
	}
	return ps, nil
}

// buildRoutes is the pool of the config file's backends and the router
// of ROUTE_POLICY. room is the keys' buckets, nil when nothing paces them.
func buildRoutes(cfg config.Config, env Env, room buckets.Store) (*route.Pool, route.Router, error) {
	specs := make([]route.Spec, 0, len(cfg.Backends))
	for _, b := range cfg.Backends {
		s := route.Spec{Name: b.Name, Kind: b.Kind, Keys: b.Keys, Cap: b.MaxConcurrency, Weight: b.Weight, Bulk: b.Bulk}
		if s.Cap == 0 {
			s.Cap = cfg.MaxConcurrency
		}
		switch {
		case b.FirstParty():
			u := b.URL
			if u == nil {
				u = cfg.UpstreamURL
			}
			opt := env.Upstream
			opt.IdleConnsPerHost = max(opt.IdleConnsPerHost, s.Cap*len(b.Keys))
			s.Client = upstream.New(u, opt)
		default:
			if env.Cloud == nil {
				return nil, nil, fmt.Errorf("backend %s: kind %s is not built into this sluice", b.Name, b.Kind)
			}
			c, err := env.Cloud(b)
			if err != nil {
				return nil, nil, fmt.Errorf("backend %s: %w", b.Name, err)
			}
			s.Client = c
		}
		specs = append(specs, s)
	}
	var r route.Room // nil, not a nil buckets.Store: nothing paces the keys
	if room != nil {
		r = room
	}
	pool, err := route.New(specs, r, env.Getenv)
	if err != nil {
		return nil, nil, err
	}
	if room != nil {
		seedLimits(cfg.Backends, pool, room)
	}
	var router route.Router = route.Affinity{}
	if cfg.RoutePolicy == config.RouteRoundRobin {
		router = &route.RoundRobin{}
	}
	return pool, router, nil
}

// seedLimits gives the keys of each backend that declares its limits
// (requests_per_minute and the rest) buckets of that size, full, as the
// headers of an answer would: a cloud's answers say none, so its keys are
// paced by what the file says, and a 429 holds them as any key's.
func seedLimits(backends []config.Backend, pool *route.Pool, store buckets.Store) {
	now := time.Now()
	for _, b := range backends {
		h := http.Header{}
		for kind, n := range map[string]int{"requests": b.RequestsPerMinute, "input-tokens": b.InputTokensPerMinute, "output-tokens": b.OutputTokensPerMinute} {
			if n > 0 {
				h.Set("anthropic-ratelimit-"+kind+"-limit", strconv.Itoa(n))
				h.Set("anthropic-ratelimit-"+kind+"-remaining", strconv.Itoa(n))
			}
		}
		if len(h) == 0 {
			continue
		}
		for _, k := range pool.Backend(b.Name).Keys {
			store.Observe(k.Hash, pace.Debit{}, http.StatusOK, h, now)
		}
	}
}

// buildGate is the gate: BATCH_MAX_CONCURRENCY slots shared with the
// fleet (GATE_BACKEND=redis), or here, in the order of GATE_ORDER and
// with the limit of GATE_LIMIT.
func buildGate(cfg config.Config, shared Shared, m *metrics.Metrics) (gate.Gate, error) {
	if cfg.GateBackend == config.GateRedis {
		if shared == nil {
			return nil, errors.New("GATE_BACKEND=redis, and no shared store was opened")
		}
		return shared.Gate(cfg.GateOrder, cfg.MaxConcurrency)
	}
	var order gate.Order // nil: one FIFO line
	if cfg.GateOrder == config.GateOrderFair {
		order = gate.NewFair(cfg.PriorityStarve)
	}
	limit, err := gateLimit(cfg, m)
	if err != nil {
		return nil, err
	}
	return gate.New(limit, order)
}

// gateLimit is the gate's limit by GATE_LIMIT: BATCH_MAX_CONCURRENCY, or
// an adaptive limit under it whose changes the metrics count.
func gateLimit(cfg config.Config, m *metrics.Metrics) (gate.Limit, error) {
	ceiling := gate.Fixed(cfg.MaxConcurrency)
	if cfg.GateLimit != config.GateLimitAdaptive {
		return ceiling, nil
	}
	// From the ceiling, as a static cap would start: probing up from the
	// floor cost a fifth of capacity-shift's first phase (docs/benchmarks.md,
	// Adaptive limit), and a loaded baseline only makes it cut later.
	last := cfg.MaxConcurrency
	return gate.NewAdaptive(gate.AdaptiveConfig{Ceiling: ceiling, Floor: cfg.GateLimitFloor, StartAtCeiling: true,
		OnChange: func(slots int) { // under the gate's lock, which also orders last
			if slots > last {
				m.GateLimitChanges.WithLabelValues("up").Inc()
			} else {
				m.GateLimitChanges.WithLabelValues("down").Inc()
			}
			last = slots
		}})
}

// cacheDoubted logs and counts CACHE_AWARE's change of mind about a
// prefix. The key is a hash of the prompt, not the prompt.
func cacheDoubted(log *slog.Logger, m *metrics.Metrics) func(cacheaware.Doubt) {
	return func(d cacheaware.Doubt) {
		key := strconv.FormatUint(d.Key, 16)
		if d.Trusted {
			m.CacheDistrusted.WithLabelValues("trusted").Inc()
			log.Info("cache-aware: a request read a prefix its followers had not; holding followers on it again",
				"prefix", key, "tokens", d.Tokens)
			return
		}
		m.CacheDistrusted.WithLabelValues("distrusted").Inc()
		log.Warn("cache-aware: followers held for a prefix read none of it; not holding on it until a request reads it, or for the cool-off",
			"prefix", key, "tokens", d.Tokens, "groups", d.Groups, "until", d.Until.UTC().Format("15:04:05"))
	}
}
