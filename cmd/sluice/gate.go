package main

import (
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/cloud"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/dispatch/buckets"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/gate/redisgate"
	"github.com/sluicehq/sluice/redisconn"
	"github.com/sluicehq/sluice/redisshare"
	"github.com/sluicehq/sluice/route"
)

// sharedGateName is the gate every replica on one Redis shares; fleets
// that must not share a cap use Redis databases of their own (REDIS_URL's
// /db).
const sharedGateName = "sluice:gate"

// sharedBucketsName and sharedCacheName are the rate-limit buckets and
// the cache groups every replica on one Redis shares under
// GATE_BACKEND=redis.
const (
	sharedBucketsName = "sluice:bucket"
	sharedCacheName   = "sluice:cache"
	sharedRoutesName  = "sluice:routes"
)

// buildParts builds the proxy's policies from cfg (package assemble),
// with the Redis the replicas share when GATE_BACKEND=redis and windowing
// is on. It returns the shared store's metrics, to serve too, and the
// function that takes this replica out of Redis once the server has
// drained.
func buildParts(cfg config.Config, log *slog.Logger) (*assemble.Parts, []prometheus.Collector, func(), error) {
	env := assemble.Env{Log: log, Cloud: cloud.New}
	var shared *sharedRedis
	closeShared := func() {}
	if cfg.Enabled && cfg.GateBackend == config.GateRedis {
		c, err := redisconn.Open(redisconn.Options{URL: cfg.RedisURL, Timeout: cfg.RedisTimeout,
			LeaseTTL: cfg.GateLeaseTTL, Replicas: cfg.GateReplicas, Logger: log})
		if err != nil {
			return nil, nil, nil, err
		}
		shared = &sharedRedis{c: c, log: log.With("redis", redisconn.Redacted(cfg.RedisURL), "replica", c.Replica())}
		env.Shared = shared
		closeShared = func() { c.Close() }
	}
	parts, err := assemble.Build(cfg, env)
	if err != nil {
		closeShared()
		return nil, nil, nil, err
	}
	if parts.Routes != nil {
		logRoutes(cfg, parts, log)
	}
	var collectors []prometheus.Collector
	if shared != nil {
		// Asked for after the parts are made: the connection's metrics
		// include a fallback gauge for each part it serves.
		collectors = append(shared.c.Collectors(), shared.collectors...)
	}
	return parts, collectors, closeShared, nil
}

// sharedRedis is the Redis the replicas share, as package assemble asks
// for its parts.
type sharedRedis struct {
	c   *redisconn.Client
	log *slog.Logger // with the redacted URL and this replica
	// collectors are the gate's metrics, once it is made.
	collectors []prometheus.Collector
}

func (s *sharedRedis) Gate(order config.GateOrder, capacity int) (gate.Gate, error) {
	open := redisgate.New
	if order == config.GateOrderFair {
		open = redisgate.NewFair
	}
	g, err := open(s.c, sharedGateName, capacity)
	if err != nil {
		return nil, err
	}
	s.collectors = append(s.collectors, g.Collectors()...)
	s.log.Info("the gate is shared through Redis", "cap", capacity, "shared_now", g.Shared())
	return g, nil
}

func (s *sharedRedis) Buckets() buckets.Store {
	return redisshare.NewBuckets(s.c, sharedBucketsName)
}

func (s *sharedRedis) CacheGroups() cacheaware.Share {
	return redisshare.NewCacheGroups(s.c, sharedCacheName)
}

// Lane is the shared lane of one backend key: a gate of its own in Redis,
// named for the key (never the key itself).
func (s *sharedRedis) Lane(key string, capacity int) (gate.Gate, error) {
	return redisgate.New(s.c, sharedGateName+":lane:"+key, capacity)
}

func (s *sharedRedis) Routes() route.Share {
	return redisshare.NewRoutes(s.c, sharedRoutesName)
}

// logRoutes says, at start, what requests are routed over: each backend
// and its keys by name (never a key), and a warning when anyone who
// reaches sluice may spend the keys it holds.
func logRoutes(cfg config.Config, parts *assemble.Parts, log *slog.Logger) {
	for _, b := range parts.Routes.Backends {
		names := make([]string, len(b.Keys))
		for i, k := range b.Keys {
			names[i] = k.Name
		}
		log.Info("routing to backend", "backend", b.Name, "kind", b.Kind, "keys", strings.Join(names, " "), "max_concurrency", b.Cap, "route_policy", cfg.RoutePolicy.String())
	}
	if !cfg.InboundAuth() {
		log.Warn("the config file's backends hold upstream keys and none of INBOUND_KEYS_FILE, INBOUND_KEYS_STORE and OIDC_ISSUER is set: whoever reaches sluice spends them; give clients sluice keys (docs/routing.md)")
	}
}
