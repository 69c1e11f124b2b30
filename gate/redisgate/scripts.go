package redisgate

import "github.com/redis/go-redis/v9"

// The gate's state in Redis, under one hash tag so that every key of a gate
// lives in one Redis Cluster slot and every script may touch them all:
//
//	{name}:h   sorted set, score 0: the leases (slots held), one member per
//	           ticket, "replica|n", so that one replica's are a lex range
//	{name}:w   sorted set: the line, each waiting ticket scored by its
//	           arrival number (global arrival order)
//	{name}:wr  sorted set, score 0: the same waiting tickets, by lex, to
//	           find one replica's at once
//	{name}:r   sorted set: the live replicas, scored by when their lease
//	           ends (Redis's own clock, in ms)
//	{name}:e   hash: each live replica's epoch (see resync)
//	{name}:n   counter: arrival numbers and the snapshot version
//	{name}:f   hash, a fair gate's (GATE_ORDER=fair): each tenant's finish
//	           tag, and under the field "" the line's virtual time
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
//	{status, version, held, waiting, replicas, granted ids of the caller...}
//
// then, for the heartbeat, the caller's lease ids after a 0.

// scriptHead is the part every script shares: its arguments, the clock,
// reaping, granting and the reply.
const scriptHead = `
local H, W, WR, R, E, N, F = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local me, epoch, cap, ttl, ch = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A fair line's score is its class times classGap plus its start tag.
local classGap = 1e13

local function range(r) return '[' .. r .. '|', '[' .. r .. '|\255' end

local function remove(r) -- replica r's leases, places in line and entry
  local lo, hi = range(r)
  redis.call('ZREMRANGEBYLEX', H, lo, hi)
  for _, id in ipairs(redis.call('ZRANGEBYLEX', WR, lo, hi)) do redis.call('ZREM', W, id) end
  redis.call('ZREMRANGEBYLEX', WR, lo, hi)
  redis.call('ZREM', R, r)
  redis.call('HDEL', E, r)
end

local function reap()
  for _, r in ipairs(redis.call('ZRANGEBYSCORE', R, '-inf', now)) do remove(r) end
end

local function stale() return redis.call('HGET', E, me) ~= epoch end

local function renew() redis.call('ZADD', R, now + ttl, me) end

local out = {}
local function grant()
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
  local res = {status, redis.call('INCR', N), redis.call('ZCARD', H), redis.call('ZCARD', W), redis.call('ZCARD', R)}
  for _, id in ipairs(out) do res[#res + 1] = id end
  return res
end

reap()
`

// joinScript puts ARGV[6] in line, or gives it a free slot at once when
// nobody waits. Status 1: granted. A fair gate's join also names the
// ticket's tenant (ARGV[7]), its cost over its weight (ARGV[8]) and its
// class (ARGV[9]): its start tag is the later of the tenant's finish tag
// and the virtual time, the tenant's finish tag moves on by its cost, and
// it waits scored by class and start tag instead of arrival number.
var joinScript = redis.NewScript(scriptHead + `
if stale() then return {-1} end
renew()
grant()
local id = ARGV[6]
local score
if ARGV[7] then
  local v = tonumber(redis.call('HGET', F, '')) or 0
  local start = math.max(v, tonumber(redis.call('HGET', F, ARGV[7])) or 0)
  redis.call('HSET', F, ARGV[7], start + tonumber(ARGV[8]))
  if redis.call('ZCARD', H) < cap and redis.call('ZCARD', W) == 0 then
    redis.call('HSET', F, '', start)
    redis.call('PEXPIRE', F, 600000)
    redis.call('ZADD', H, 0, id)
    return reply(1)
  end
  redis.call('PEXPIRE', F, 600000)
  score = tonumber(ARGV[9]) * classGap + start
elseif redis.call('ZCARD', H) < cap and redis.call('ZCARD', W) == 0 then
  redis.call('ZADD', H, 0, id)
  return reply(1)
else
  score = redis.call('INCR', N)
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
if status == 0 and redis.call('ZREM', W, id) == 1 then redis.call('ZREM', WR, id) end
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
// lease ids, adopted even past the cap (they are real calls in flight),
// then its waiting ids in its line's order, each keeping its place if it
// still has one, else joining the back. Other entries of the caller's go.
// It sets the caller's epoch to ARGV[2], so that a script the caller sent
// before it, still in flight, is answered "stale" and changes nothing.
var resyncScript = redis.NewScript(scriptHead + `
redis.call('HSET', E, me, epoch)
renew()
local lo, hi = range(me)
local nh = tonumber(ARGV[6])
local keep = {}
for i = 7, 6 + nh do
  local id = ARGV[i]
  keep[id] = true
  redis.call('ZADD', H, 0, id)
  redis.call('ZREM', W, id)
  redis.call('ZREM', WR, id)
end
for _, id in ipairs(redis.call('ZRANGEBYLEX', H, lo, hi)) do
  if not keep[id] then redis.call('ZREM', H, id) end
end
for i = 7 + nh, #ARGV do keep[ARGV[i]] = true end
for _, id in ipairs(redis.call('ZRANGEBYLEX', WR, lo, hi)) do
  if not keep[id] then redis.call('ZREM', WR, id); redis.call('ZREM', W, id) end
end
for i = 7 + nh, #ARGV do
  local id = ARGV[i]
  if not redis.call('ZSCORE', W, id) then
    redis.call('ZADD', W, redis.call('INCR', N), id)
    redis.call('ZADD', WR, 0, id)
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
