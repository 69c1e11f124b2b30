package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/gate/redisgate"
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
)

// buildParts builds the proxy's policies from cfg (package assemble),
// with the Redis the replicas share when GATE_BACKEND=redis and windowing
// is on. It returns the shared store's metrics, to serve too, and the
// function that takes this replica out of Redis once the server has
// drained.
func buildParts(cfg config.Config, log *slog.Logger) (*assemble.Parts, []prometheus.Collector, func(), error) {
	env := assemble.Env{Log: log}
	var collectors []prometheus.Collector
	closeShared := func() {}
	if cfg.Enabled && cfg.GateBackend == config.GateRedis {
		c, err := redisgate.Open(redisgate.Options{URL: cfg.RedisURL, Timeout: cfg.RedisTimeout,
			LeaseTTL: cfg.GateLeaseTTL, Replicas: cfg.GateReplicas, Logger: log})
		if err != nil {
			return nil, nil, nil, err
		}
		env.Shared = &sharedRedis{c: c, log: log.With("redis", redisgate.Redacted(cfg.RedisURL), "replica", c.Replica())}
		collectors = c.Collectors()
		closeShared = func() { c.Close() }
	}
	parts, err := assemble.Build(cfg, env)
	if err != nil {
		closeShared()
		return nil, nil, nil, err
	}
	return parts, collectors, closeShared, nil
}

// sharedRedis is the Redis the replicas share, as package assemble asks
// for its parts.
type sharedRedis struct {
	c   *redisgate.Client
	log *slog.Logger // with the redacted URL and this replica
}

func (s *sharedRedis) Gate(order config.GateOrder, capacity int) (gate.Gate, error) {
	open := s.c.Gate
	if order == config.GateOrderFair {
		open = s.c.FairGate
	}
	g, err := open(sharedGateName, capacity)
	if err != nil {
		return nil, err
	}
	s.log.Info("the gate is shared through Redis", "cap", capacity, "shared_now", g.Shared())
	return g, nil
}

func (s *sharedRedis) Buckets() dispatch.BucketStore { return s.c.Buckets(sharedBucketsName) }

func (s *sharedRedis) CacheGroups() dispatch.CacheShare { return s.c.CacheGroups(sharedCacheName) }
