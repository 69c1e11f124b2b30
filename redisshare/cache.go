package redisshare

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/redisconn"
)

// CacheGroups shares CACHE_AWARE's prefix registry (cacheaware.CacheAware)
// with every replica on one Redis: one key per prefix names its leader's
// replica while the leader is in flight (SET NX with a lease of the
// leader wait, so a crashed leader's claim lapses by itself) and says
// "warm" for the prefix's TTL once its response has begun. Followers on
// the other replicas are held by their own cache-aware release, a record each and
// a timer per prefix, and freed by the message the leader's replica
// publishes on one channel when its response begins: no goroutine and no
// polling per follower.
//
// A wave's unknown prefixes are claimed in one round trip; a leader's
// begun is one more. While Redis cannot be reached every prefix is
// claimed here, as if alone: each replica then pays its own cache write.
type CacheGroups struct {
	c       *redisconn.Client
	prefix  string // "{name}:" and the prefix's key make its Redis key
	channel string // "{name}:begun"
	out     *redisconn.Outage

	mu     sync.Mutex
	listen func(key uint64, ttl time.Duration, begun bool)
}

var _ cacheaware.Share = (*CacheGroups)(nil)

// NewCacheGroups returns the shared cache groups called name on c.
func NewCacheGroups(c *redisconn.Client, name string) *CacheGroups {
	tag := "{" + name + "}"
	g := &CacheGroups{c: c, prefix: tag + ":", channel: tag + ":begun"}
	g.out = c.Outage("cache")
	c.Handle(g.channel, g.message)
	c.Subscribe(g.channel) // remembered, and renewed on reconnect, even if it fails now
	return g
}

// claimScript answers, for each prefix key, "c" (it was cold: claimed
// for ARGV[1], this replica, for ARGV[2] ms), "w" (warm: its TTL,
// ARGV[2+i] ms, starts again, as a hit refreshes the API's entry) or "l"
// (led by another replica).
var claimScript = redis.NewScript(`
local me, lease = ARGV[1], ARGV[2]
local out = {}
for i, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if not v then
    redis.call('SET', k, me, 'PX', lease)
    out[i] = 'c'
  elseif v == 'w' then
    redis.call('PEXPIRE', k, ARGV[2 + i])
    out[i] = 'w'
  elseif v == me then
    out[i] = 'c'
  else
    out[i] = 'l'
  end
end
return out
`)

// begunScript marks the first ARGV[2] keys warm, each for its TTL
// (ARGV[3..]), and drops the others if this replica (ARGV[1]) still
// claims them; it publishes each change on the channel as
// "<key> b <ttl ms>" or "<key> e". The channel is the last key.
var begunScript = redis.NewScript(`
local me, nb, ch = ARGV[1], tonumber(ARGV[2]), KEYS[#KEYS]
for i = 1, #KEYS - 1 do
  local k, name = KEYS[i], ARGV[2 + 2 * i - 1]
  if i <= nb then
    redis.call('SET', k, 'w', 'PX', ARGV[2 + 2 * i])
    redis.call('PUBLISH', ch, name .. ' b ' .. ARGV[2 + 2 * i])
  elseif redis.call('GET', k) == me then
    redis.call('DEL', k)
    redis.call('PUBLISH', ch, name .. ' e')
  end
end
return {}
`)

func (g *CacheGroups) key(k uint64) string { return g.prefix + strconv.FormatUint(k, 16) }

// Claim claims the cold prefixes of ps for this replica, for lease.
func (g *CacheGroups) Claim(ps []cacheaware.SharedPrefix, lease time.Duration) []cacheaware.Claim {
	out := make([]cacheaware.Claim, len(ps)) // ClaimLead each: alone, on an outage
	if !g.out.Up() {
		return out
	}
	keys := make([]string, len(ps))
	args := make([]any, 0, 2+len(ps))
	args = append(args, g.c.Replica(), max(lease.Milliseconds(), 1))
	for i, p := range ps {
		keys[i] = g.key(p.Key)
		args = append(args, max(p.TTL.Milliseconds(), 1))
	}
	v, err := g.c.Eval(claimScript, keys, args...)
	if err != nil {
		g.out.Fail(err)
		return out
	}
	for i := range min(len(v), len(out)) {
		switch v[i] {
		case "w":
			out[i] = cacheaware.ClaimWarm
		case "l":
			out[i] = cacheaware.ClaimElsewhere
		}
	}
	return out
}

// Begun marks begun warm fleet-wide and gives up ended, telling the
// other replicas' followers.
func (g *CacheGroups) Begun(begun, ended []cacheaware.SharedPrefix) {
	if !g.out.Up() {
		return
	}
	keys := make([]string, 0, len(begun)+len(ended)+1)
	args := make([]any, 0, 2+2*(len(begun)+len(ended)))
	args = append(args, g.c.Replica(), len(begun))
	for _, p := range append(begun[:len(begun):len(begun)], ended...) {
		keys = append(keys, g.key(p.Key))
		args = append(args, strconv.FormatUint(p.Key, 16), max(p.TTL.Milliseconds(), 1))
	}
	keys = append(keys, g.channel)
	if _, err := g.c.Eval(begunScript, keys, args...); err != nil {
		g.out.Fail(err)
	}
}

// Listen sets the function told of the other replicas' leaders.
func (g *CacheGroups) Listen(f func(key uint64, ttl time.Duration, begun bool)) {
	g.mu.Lock()
	g.listen = f
	g.mu.Unlock()
}

// message is one "<key> b <ttl ms>" or "<key> e" from the channel.
func (g *CacheGroups) message(msg string) {
	g.mu.Lock()
	f := g.listen
	g.mu.Unlock()
	fields := strings.Fields(msg)
	if f == nil || len(fields) < 2 {
		return
	}
	key, err := strconv.ParseUint(fields[0], 16, 64)
	if err != nil {
		return
	}
	var ttl time.Duration
	if len(fields) == 3 {
		ms, _ := strconv.ParseInt(fields[2], 10, 64)
		ttl = time.Duration(ms) * time.Millisecond
	}
	f(key, ttl, fields[1] == "b")
}

// Shared reports whether the shared cache groups are in force.
func (g *CacheGroups) Shared() bool { return g.out.Up() }
