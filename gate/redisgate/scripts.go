package redisgate

import "github.com/redis/go-redis/v9"

// The gate's state in Redis, under one hash tag so that every key of a gate
// lives in one Redis Cluster slot and every script may touch them all:
//
//	{name}:h   sorted set, score 0: the leases (slots held), one member per
//	           ticket, "replica|n", so that one replica's are a lex range
//	{name}:w   sorted set: the line, each waiting ticket scored by its
//	           arrival time in µs on Redis's clock (global arrival order),
//	           or a fair gate's by its class and start tag
//	{name}:wr  sorted set, score 0: the same waiting tickets, and the held
//	           back ones, by lex, to find one replica's at once
//	{name}:r   sorted set: the live replicas, scored by when their lease
//	           ends (Redis's own clock, in ms)
//	{name}:e   hash: each live replica's epoch (see resync)
//	{name}:n   counter: the snapshot version
//	{name}:f   hash, a fair gate's (GATE_ORDER=fair): each tenant's finish
//	           tag, and under the field "" the line's virtual time
//	{name}:s   hash, expiring: the replicas a stall reaped that have not
//	           resynced yet; grants wait while it exists (see below)
//	{name}:p   sorted set: tickets held back from the line while grants
//	           wait, scored by arrival time in µs on Redis's clock
//	{name}:q   hash: a fair gate's held back tickets' tenant, cost and
//	           class, to reckon their start tags when they join the line
//
// A lease is held by its replica's entry in {name}:r: a replica renews the
// entry with every script and every heartbeat, and a replica whose entry
// has ended is reaped by the next script anyone runs, its leases and its
// waiting tickets with it. Each replica is told of grants to its tickets
// on the channel {name}:grant:<replica>.
//
// Every script reaps, checks the caller's epoch (a replica that was reaped,
// or a Redis that lost its data, answers "stale", and the replica resyncs),
// hands free slots to the head of the line, and returns
//
//	{status, version, held, waiting, replicas, held by the caller,
//	 granted ids of the caller...}
//
// then, for the heartbeat, the caller's lease ids after a 0.
//
// After a stall longer than the lease, Redis's clock has run on and the
// first script reaps every replica; each comes back by its resync, at its
// next probe. Grants wait until every replica so reaped has resynced, or
// for at most a second (the lease, if shorter): until then the line lacks
// the waiters, and the count the calls in flight, of those not back yet,
// and granting would serve the first replica back's whole line first and
// pass the cap. While grants wait, tickets resynced or joining are held
// back in {name}:p by arrival time; when the wait ends they join the line
// in that order (a fair gate's start tags reckoned in it), so the line is
// in arrival order across replicas. A reap is taken for a stall's when the
// caller is itself among the reaped (its heartbeats went unanswered) or a
// lease ended longer ago than a lease lasts (no heartbeat reached Redis
// since); a crashed replica, reaped by the others' next heartbeat, holds
// nothing up.

// scriptHead is the part every script shares: its arguments, the clock,
// reaping, granting and the reply.
const scriptHead = `
local H, W, WR, R, E, N, F, S, P, Q = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local me, epoch, cap, ttl, ch = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- A fair line's score is its class times classGap plus its start tag.
local classGap = 1e13

local function range(r) return '[' .. r .. '|', '[' .. r .. '|\255' end

local function unwait(id) -- id out of the line, or out of the held back
  redis.call('ZREM', W, id)
  redis.call('ZREM', P, id)
  redis.call('HDEL', Q, id)
  redis.call('ZREM', WR, id)
end

local function remove(r) -- replica r's leases, places in line and entry
  local lo, hi = range(r)
  redis.call('ZREMRANGEBYLEX', H, lo, hi)
  for _, id in ipairs(redis.call('ZRANGEBYLEX', WR, lo, hi)) do unwait(id) end
  redis.call('ZREM', R, r)
  redis.call('HDEL', E, r)
  redis.call('HDEL', S, r)
end

-- hold is how long grants wait, at most, for the replicas a stall reaped.
local hold = math.min(1000, ttl)

local function reap()
  local ended = redis.call('ZRANGEBYSCORE', R, '-inf', now, 'WITHSCORES')
  local stall = false
  for i = 1, #ended, 2 do
    if ended[i] == me or now - tonumber(ended[i + 1]) > ttl then stall = true end
  end
  for i = 1, #ended, 2 do
    remove(ended[i])
    if stall then redis.call('HSET', S, ended[i], 1) end
  end
  if stall then redis.call('PEXPIRE', S, hold) end
end

local function stale() return redis.call('HGET', E, me) ~= epoch end

local function renew() redis.call('ZADD', R, now + ttl, me) end

-- holding: grants wait for the replicas a stall reaped to resync.
local function holding() return redis.call('EXISTS', S) == 1 end

-- fairScore is a fair ticket's score in line, its start tag the later of
-- its tenant's finish tag and the virtual time; the tenant's finish tag
-- moves on by its cost. It returns the score and the start tag.
local function fairScore(tenant, cost, class)
  local v = tonumber(redis.call('HGET', F, '')) or 0
  local start = math.max(v, tonumber(redis.call('HGET', F, tenant)) or 0)
  redis.call('HSET', F, tenant, start + cost)
  redis.call('PEXPIRE', F, 600000)
  return class * classGap + start, start
end

-- holdBack puts id, which arrived at µs time at (a fair ticket's tenant,
-- cost and class with it), among the tickets held back while grants wait.
local function holdBack(id, at, tenant, cost, class)
  redis.call('ZADD', P, at, id)
  redis.call('ZADD', WR, 0, id)
  if tenant then redis.call('HSET', Q, id, tenant .. '\n' .. cost .. '\n' .. class) end
end

-- release puts the held back tickets in line, in their order of arrival.
local function release()
  if redis.call('EXISTS', P) == 0 then return end
  local held = redis.call('ZRANGE', P, 0, -1, 'WITHSCORES')
  for i = 1, #held, 2 do
    local id, score = held[i], tonumber(held[i + 1])
    local info = redis.call('HGET', Q, id)
    if info then
      local tenant, cost, class = string.match(info, '^(.*)\n(.-)\n(.-)$')
      score = fairScore(tenant, tonumber(cost), tonumber(class))
    end
    redis.call('ZADD', W, score, id)
  end
  redis.call('DEL', P, Q)
end

-- arrival is the score of a ticket joining the back of a FIFO line now.
local function arrival()
  local last = redis.call('ZRANGE', W, -1, -1, 'WITHSCORES')
  if #last == 0 then return nowus end
  return math.max(nowus, tonumber(last[2]) + 1)
end

local out = {}
local function grant()
  if holding() then return end
  release()
  while redis.call('ZCARD', H) < cap do
    local head = redis.call('ZPOPMIN', W)
    if #head == 0 then return end
    local id = head[1]
    if redis.call('EXISTS', F) == 1 then -- a fair line: its virtual time moves to the granted start tag
      local v = tonumber(head[2]) % classGap
      if v > (tonumber(redis.call('HGET', F, '')) or 0) then redis.call('HSET', F, '', v) end
      if redis.call('ZCARD', W) == 0 then redis.call('DEL', F) end -- credit and debt last one busy stretch
    end
    redis.call('ZREM', WR, id)
    redis.call('ZADD', H, 0, id)
    local r = string.match(id, '^([^|]+)|')
    if r == me then out[#out + 1] = id else redis.call('PUBLISH', ch .. r, id) end
  end
end

local function reply(status)
  local lo, hi = range(me)
  local res = {status, redis.call('INCR', N), redis.call('ZCARD', H), redis.call('ZCARD', W) + redis.call('ZCARD', P),
    redis.call('ZCARD', R), redis.call('ZLEXCOUNT', H, lo, hi)}
  for _, id in ipairs(out) do res[#res + 1] = id end
  return res
end

reap()
`

// joinScript puts ARGV[6] in line, or gives it a free slot at once when
// nobody waits. Status 1: granted. A FIFO gate's line is scored by
// arrival time. A fair gate's join also names the ticket's tenant
// (ARGV[7]), its cost over its weight (ARGV[8]) and its class (ARGV[9]):
// it waits scored by class and start tag (fairScore). While grants wait
// after a stall it is held back, by arrival time.
var joinScript = redis.NewScript(scriptHead + `
if stale() then return {-1} end
renew()
grant()
local id = ARGV[6]
if holding() then
  holdBack(id, nowus, ARGV[7], ARGV[8], ARGV[9])
  return reply(0)
end
local score
if ARGV[7] then
  local start
  score, start = fairScore(ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9]))
  if redis.call('ZCARD', H) < cap and redis.call('ZCARD', W) == 0 then
    redis.call('HSET', F, '', start)
    redis.call('ZADD', H, 0, id)
    return reply(1)
  end
elseif redis.call('ZCARD', H) < cap and redis.call('ZCARD', W) == 0 then
  redis.call('ZADD', H, 0, id)
  return reply(1)
else
  score = arrival()
end
redis.call('ZADD', W, score, id)
redis.call('ZADD', WR, 0, id)
return reply(0)
`)

// dropScript takes ARGV[6] out wherever it is: its lease (status 1) or its
// place in line (status 0); the slot passes to the head of the line.
var dropScript = redis.NewScript(scriptHead + `
if stale() then return {-1} end
renew()
local id = ARGV[6]
local status = redis.call('ZREM', H, id)
if status == 0 then unwait(id) end
grant()
return reply(status)
`)

// beatScript renews the caller's lease, grants what reaping freed, and
// returns the caller's lease ids after its granted ones and a 0, for the
// caller to check against its own (a grant whose message was lost).
var beatScript = redis.NewScript(scriptHead + `
if stale() then return {-1} end
renew()
grant()
local res = reply(0)
res[#res + 1] = 0
local lo, hi = range(me)
for _, id in ipairs(redis.call('ZRANGEBYLEX', H, lo, hi)) do res[#res + 1] = id end
return res
`)

// resyncScript makes Redis hold exactly what the caller holds: ARGV[6]
// lease ids (after ARGV[7], "1" for a fair gate), adopted even past the
// cap (they are real calls in flight), then its waiting tickets in its
// line's order, each its id, how long ago it arrived in µs and, a fair
// gate's, its tenant, cost over weight and class. Each keeps its place if
// it still has one; else it is held back by its arrival time and joins
// the line when the held back do (at once, unless grants wait for other
// replicas after a stall). Ages rather than times, so that the replicas'
// clocks need not agree with Redis's. Other entries of the caller's go.
// It sets the caller's epoch to ARGV[2], so that a script the caller sent
// before it, still in flight, is answered "stale" and changes nothing,
// and ends the wait on grants for the caller.
var resyncScript = redis.NewScript(scriptHead + `
redis.call('HSET', E, me, epoch)
redis.call('HDEL', S, me)
renew()
local lo, hi = range(me)
local nh, fair = tonumber(ARGV[6]), ARGV[7] == '1'
local stride = 2
if fair then stride = 5 end
local keep = {}
for i = 8, 7 + nh do
  local id = ARGV[i]
  keep[id] = true
  redis.call('ZADD', H, 0, id)
  unwait(id)
end
for _, id in ipairs(redis.call('ZRANGEBYLEX', H, lo, hi)) do
  if not keep[id] then redis.call('ZREM', H, id) end
end
for i = 8 + nh, #ARGV, stride do keep[ARGV[i]] = true end
for _, id in ipairs(redis.call('ZRANGEBYLEX', WR, lo, hi)) do
  if not keep[id] then unwait(id) end
end
for i = 8 + nh, #ARGV, stride do
  local id = ARGV[i]
  if not redis.call('ZSCORE', W, id) and not redis.call('ZSCORE', P, id) then
    local at = nowus - tonumber(ARGV[i + 1])
    if fair then holdBack(id, at, ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]) else holdBack(id, at) end
  end
end
grant()
return reply(0)
`)

// byeScript takes the caller out of the fleet: its leases, its tickets in
// line and its entry go, and its slots pass to the others' waiters.
var byeScript = redis.NewScript(scriptHead + `
remove(me)
me = ''
grant()
return reply(0)
`)
