package main

import (
	"log/slog"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gate/redisgate"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/redisconn"
	"github.com/sluicehq/sluice/redisshare"
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

// withSharedGate puts the Redis gate, and the shared buckets and cache
// groups when their policies are on, into opt when GATE_BACKEND=redis and
// windowing is on, and returns the function that takes this replica out
// of Redis once the server has drained.
func withSharedGate(cfg config.Config, log *slog.Logger, opt *proxy.Options) (closeGate func(), err error) {
	if !cfg.Enabled || cfg.GateBackend != "redis" {
		return func() {}, nil
	}
	c, err := redisconn.Open(redisconn.Options{URL: cfg.RedisURL, Timeout: cfg.RedisTimeout,
		LeaseTTL: cfg.GateLeaseTTL, Replicas: cfg.GateReplicas, Logger: log})
	if err != nil {
		return nil, err
	}
	open := redisgate.New
	if cfg.GateOrder == "fair" {
		open = redisgate.NewFair
	}
	g, err := open(c, sharedGateName, cfg.MaxConcurrency)
	if err != nil {
		c.Close()
		return nil, err
	}
	opt.Gate = g
	if cfg.RateLimitPacing == "buckets" {
		opt.Buckets = redisshare.NewBuckets(c, sharedBucketsName)
	}
	if cfg.CacheAware {
		opt.CacheShare = redisshare.NewCacheGroups(c, sharedCacheName)
	}
	opt.Collectors = append(opt.Collectors, c.Collectors()...)
	opt.Collectors = append(opt.Collectors, g.Collectors()...)
	log.Info("the gate is shared through Redis", "redis", redisconn.Redacted(cfg.RedisURL), "replica", c.Replica(),
		"cap", cfg.MaxConcurrency, "shared_now", g.Shared())
	return func() { c.Close() }, nil
}
