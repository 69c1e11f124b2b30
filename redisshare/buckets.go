// Package redisshare is the state of dispatch's policies that sluice
// replicas share through Redis under GATE_BACKEND=redis: each upstream
// key's rate-limit buckets (Buckets, a buckets.Store) and
// CACHE_AWARE's prefix registry (CacheGroups, a cacheaware.Share). Both
// run on the replica's redisconn.Client, beside the shared gate
// (gate/redisgate), and fall back to this replica's own while Redis does
// not answer. docs/scaling.md tells how they work and what they cost.
package redisshare

import (
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/redisconn"
	"github.com/sluicehq/sluice/retry"
)

// Buckets is the model of each upstream key's rate-limit buckets (the one
// pace.Buckets keeps in one process) kept in Redis, so that every replica
// debits and learns the same buckets: three replicas on one key fill its
// limits together, not three times over. Each key is one hash, changed
// only by bucketScript, atomically, with the refill reckoned from Redis's
// own clock; each call is one round trip.
//
// FitsAt and Levels do no I/O: they read the key's state from the latest
// reply, refilled to now. While Redis cannot be reached Buckets is this
// replica's own pace.Buckets, learning from the headers of every answer
// (in and out of an outage) a 1/replicas share of each limit; a debit
// taken there is given back there.
type Buckets struct {
	c       *redisconn.Client
	prefix  string // "{name:" and the key and "}" make a key's hash
	out     *redisconn.Outage
	local   pace.Buckets
	maxHold time.Duration
	// skew moves the scripts' clock on from Redis's, in ms: tests move
	// time on with it, as a refill cannot be waited for; always 0 else.
	skew atomic.Int64

	mu     sync.Mutex
	mirror map[string]*mirrored // each key's state in the latest reply
}

// mirrored is one key's buckets as a reply left them.
type mirrored struct {
	at      time.Time // this replica's clock when the reply came
	blocked time.Time
	known   [pace.NumKinds]bool
	limit   [pace.NumKinds]float64
	level   [pace.NumKinds]float64
}

// bucketTTL is how long an untouched key's hash stays in Redis: by then
// its buckets have refilled, and the next answer's headers teach them
// again.
const bucketTTL = 10 * time.Minute

// NewBuckets returns the shared buckets called name on c: every replica
// that names the same ones shares each key's buckets.
func NewBuckets(c *redisconn.Client, name string) *Buckets {
	b := &Buckets{c: c, prefix: "{" + name + ":", maxHold: time.Minute, mirror: map[string]*mirrored{}}
	b.out = c.Outage("buckets")
	c.OnTick(func(bool) { b.local.SetShare(1 / float64(max(c.Fleet(), 1))) })
	b.local.SetShare(1 / float64(max(c.Fleet(), 1)))
	return b
}

// bucketScript is every change to one key's buckets. KEYS[1] is the
// key's hash: per kind i (0 requests, 1 input tokens, 2 output tokens,
// 3 tokens) its limit l<i> (absent while unknown), level v<i>, running
// total of debits s<i> (less what was given back) and running total of
// what was given back g<i>; "at", the clock in ms when the levels were
// reckoned; "b", until when a 429 holds the key. The clock is Redis's,
// moved on by ARGV[3] ms (0 but in tests). ARGV[1] is the operation,
// ARGV[2] the hash's TTL in ms:
//
//	take in out           debit the cost if it fits in every known bucket
//	adjust d0 d1 d2 d3    give back d<i> of each kind (negative: take)
//	observe holdms at [rem lim slack base given unc]×4
//	                      an answer's headers: keep each level at most
//	                      rem+slack, plus what refilled since at (the
//	                      clock when the answer's debit was taken, "" for
//	                      none) and what was given back since (given being
//	                      the running total then), less unc (what of the
//	                      debit the upstream did not count, a refusal's,
//	                      given back after this); rem "" for a kind not
//	                      reported. A bucket first seen starts at rem less
//	                      unc and what was debited after the answer's own
//	                      debit (base being the running total with it, ""
//	                      for none). Hold the key holdms from now.
//
// These are pace.Buckets.Observe's bounds, and pacetest checks both
// alike: the headers were made when the upstream admitted the request,
// so what was given back and what refilled since it was debited they
// cannot have seen, and a level is never raised to their lower bound
// rem-slack-(debited since): across replicas (and a shared gate's line) a
// call debited before another may reach the upstream after the other's
// answer, so what was debited since is not all the headers cannot have
// seen, and raising to it let 5 % of a burst through as 429s
// (TestThreeReplicasOneRateLimit). A level too low comes back by refill
// and by the answers' refunds.
//
// It replies {ok, wait ms, held ms, spent before ×4, given before ×4,
// clock ms, (limit, level)×4}, numbers as strings (Redis would truncate
// them to integers), a limit "" while unknown.
var bucketScript = redis.NewScript(`
local K, op, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 + tonumber(ARGV[3])
local f = {}
local raw = redis.call('HGETALL', K)
for i = 1, #raw, 2 do f[raw[i]] = tonumber(raw[i + 1]) end
local limit, level, spent, given = {}, {}, {}, {}
for i = 0, 3 do
  limit[i] = f['l' .. i]; level[i] = f['v' .. i] or 0; spent[i] = f['s' .. i] or 0; given[i] = f['g' .. i] or 0
end
local blocked = f.b or 0
local dt = now - (f.at or now)
if dt > 0 then
  for i = 0, 3 do
    if limit[i] then level[i] = math.min(limit[i], level[i] + limit[i] * dt / 60000) end
  end
end
local function uses(i)
  if not limit[i] then return false end
  return i ~= 3 or (not limit[1] and not limit[2])
end
local function save()
  local a = {'at', now, 'b', blocked}
  for i = 0, 3 do
    a[#a + 1] = 's' .. i; a[#a + 1] = spent[i]
    a[#a + 1] = 'g' .. i; a[#a + 1] = given[i]
    if limit[i] then
      a[#a + 1] = 'l' .. i; a[#a + 1] = limit[i]
      a[#a + 1] = 'v' .. i; a[#a + 1] = level[i]
    end
  end
  redis.call('HSET', K, unpack(a))
  redis.call('PEXPIRE', K, ttl)
end
local before = {spent[0], spent[1], spent[2], spent[3], given[0], given[1], given[2], given[3], now}
local function reply(ok, wait)
  local r = {ok, tostring(math.ceil(wait)), tostring(math.max(0, math.ceil(blocked - now)))}
  for i = 1, 9 do r[#r + 1] = tostring(before[i]) end
  for i = 0, 3 do
    r[#r + 1] = limit[i] and tostring(limit[i]) or ''
    r[#r + 1] = tostring(level[i])
  end
  return r
end

if op == 'take' then
  local c = {[0] = 1, tonumber(ARGV[4]), tonumber(ARGV[5])}
  c[3] = c[1] + c[2]
  local wait = math.max(0, blocked - now)
  for i = 0, 3 do
    if uses(i) then
      local n = math.min(c[i], limit[i])
      if level[i] < n then wait = math.max(wait, (n - level[i]) / limit[i] * 60000) end
    end
  end
  if wait > 0 then return reply(0, wait) end
  for i = 0, 3 do
    spent[i] = spent[i] + c[i]
    if uses(i) then level[i] = level[i] - math.min(c[i], limit[i]) end
  end
  save()
  return reply(1, 0)
elseif op == 'adjust' then
  for i = 0, 3 do
    local d = tonumber(ARGV[4 + i])
    spent[i] = spent[i] - d
    if d > 0 then given[i] = given[i] + d end
    if uses(i) then level[i] = math.min(limit[i], level[i] + d) end
  end
elseif op == 'observe' then
  local hold, at = tonumber(ARGV[4]), tonumber(ARGV[5])
  if hold > 0 then blocked = math.max(blocked, now + hold) end
  for i = 0, 3 do
    local j = 6 + 6 * i
    local rem, lim, slack = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 2])
    local base, gbase, unc = tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4]), tonumber(ARGV[j + 5])
    if rem and lim and lim > 0 then
      local hi = rem + slack
      -- never below 0: a hash lost since the debit (Redis restarted) starts its totals again
      if at then hi = hi + math.max(0, now - at) * lim / 60000 + math.max(0, given[i] - gbase) end
      hi = math.min(lim, hi)
      if not limit[i] then -- first seen: less what went after the debit, unknown to the headers
        level[i] = math.min(lim, rem) - unc
        if base then level[i] = level[i] - (spent[i] - base) end
      else
        level[i] = math.min(level[i], hi - unc)
      end
      limit[i] = lim
    end
  end
end
save()
return reply(1, 0)
`)

// state is a parsed reply.
type bucketReply struct {
	ok           bool
	wait, held   time.Duration
	spent, given [pace.NumKinds]float64 // the running totals before the call
	clock        time.Time              // the script's clock
	m            mirrored
}

func parseBucketReply(v []any, now time.Time) (bucketReply, bool) {
	var r bucketReply
	if len(v) != 4+pace.NumKinds*4 {
		return r, false
	}
	str := func(i int) string { s, _ := v[i].(string); return s }
	num := func(i int) float64 { n, _ := strconv.ParseFloat(str(i), 64); return n }
	ok, _ := v[0].(int64)
	r.ok = ok == 1
	r.wait = time.Duration(num(1) * float64(time.Millisecond))
	r.held = time.Duration(num(2) * float64(time.Millisecond))
	r.m.at = now
	if r.held > 0 {
		r.m.blocked = now.Add(r.held)
	}
	r.clock = time.UnixMicro(int64(num(3+2*pace.NumKinds) * 1000))
	for k := range pace.NumKinds {
		r.spent[k], r.given[k] = num(3+k), num(3+pace.NumKinds+k)
		if i := 4 + 2*pace.NumKinds + 2*k; str(i) != "" {
			r.m.known[k], r.m.limit[k] = true, num(i)
		}
		r.m.level[k] = num(5 + 2*pace.NumKinds + 2*k)
	}
	return r, true
}

func (b *Buckets) keys(key string) []string { return []string{b.prefix + key + "}"} }

// call runs op on key's hash and keeps the reply's state; false when Redis
// did not answer (the outage has begun) or answered nonsense.
func (b *Buckets) call(key string, now time.Time, op string, args ...any) (bucketReply, bool) {
	if !b.out.Up() {
		return bucketReply{}, false
	}
	v, err := b.c.Eval(bucketScript, b.keys(key), append([]any{op, bucketTTL.Milliseconds(), b.skew.Load()}, args...)...)
	if err != nil {
		b.out.Fail(err)
		return bucketReply{}, false
	}
	r, ok := parseBucketReply(v, now)
	if !ok {
		return r, false
	}
	b.mu.Lock()
	if _, seen := b.mirror[key]; !seen && len(b.mirror) >= pace.DefaultMaxKeys {
		for k := range b.mirror { // any one: it is only a view, and the next reply brings it back
			delete(b.mirror, k)
			break
		}
	}
	m := r.m
	b.mirror[key] = &m
	b.mu.Unlock()
	return r, true
}

// Take debits c from key's shared buckets if it fits in every one, as
// pace.Buckets.Take does; on an outage, from this replica's share.
func (b *Buckets) Take(key string, c pace.Cost, now time.Time) (pace.Debit, bool, time.Time) {
	r, ok := b.call(key, now, "take", c.Input, c.Output)
	if !ok {
		return b.local.Take(key, c, now)
	}
	if !r.ok {
		return pace.Debit{}, false, now.Add(max(r.wait, time.Millisecond))
	}
	return pace.SharedDebit(key, c, r.spent, r.given, r.clock), true, now
}

// FitsAt is when c would fit in key's buckets as the latest reply left
// them, refilled to now; it does no I/O.
func (b *Buckets) FitsAt(key string, c pace.Cost, now time.Time) time.Time {
	if !b.out.Up() {
		return b.local.FitsAt(key, c, now)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.mirror[key]
	if m == nil {
		return now
	}
	at := now
	if m.blocked.After(at) {
		at = m.blocked
	}
	for k := range pace.NumKinds {
		if !m.uses(pace.Kind(k)) {
			continue
		}
		lvl := m.levelAt(k, now)
		if n := math.Min(c.Of(pace.Kind(k)), m.limit[k]); lvl < n {
			if t := now.Add(time.Duration(math.Ceil((n - lvl) / m.limit[k] * float64(time.Minute)))); t.After(at) {
				at = t
			}
		}
	}
	return at
}

func (m *mirrored) uses(k pace.Kind) bool {
	if !m.known[k] {
		return false
	}
	return k != pace.Tokens || (!m.known[pace.InputTokens] && !m.known[pace.OutputTokens])
}

func (m *mirrored) levelAt(k int, now time.Time) float64 {
	return math.Min(m.limit[k], m.level[k]+m.limit[k]*max(now.Sub(m.at), 0).Minutes())
}

// Refund gives d back in full.
func (b *Buckets) Refund(d pace.Debit, now time.Time) {
	if !d.Shared() {
		b.local.Refund(d, now)
		return
	}
	c := d.Cost
	b.call(d.Key, now, "adjust", 1, c.Input, c.Output, c.Input+c.Output)
}

// Correct replaces d's estimate by what the answer says was spent.
func (b *Buckets) Correct(d pace.Debit, spent pace.Cost, now time.Time) {
	if !d.Shared() {
		b.local.Correct(d, spent, now)
		return
	}
	if !d.Taken() || d.Cost == spent {
		return
	}
	in, out := d.Cost.Input-spent.Input, d.Cost.Output-spent.Output
	b.call(d.Key, now, "adjust", 0, in, out, in+out)
}

// Observe learns from one answer's headers, as pace.Buckets.Observe does,
// in the shared buckets and in this replica's share.
func (b *Buckets) Observe(key string, d pace.Debit, status int, h http.Header, now time.Time) {
	local := d
	if d.Shared() {
		local = pace.Debit{}
	}
	b.local.Observe(key, local, status, h, now)
	if !b.out.Up() {
		return
	}
	var hold time.Duration
	at, mine := "", d.Shared() && d.Key == key
	if mine {
		at = strconv.FormatFloat(float64(d.At().UnixMicro())/1000, 'f', -1, 64)
	}
	args := make([]any, 0, 2+6*pace.NumKinds)
	for k := range pace.NumKinds {
		prefix := "Anthropic-Ratelimit-" + pace.Kind(k).String()
		limit, lok := pace.HeaderInt(h, prefix+"-Limit")
		rem, rok := pace.HeaderInt(h, prefix+"-Remaining")
		if rok && (!lok || limit <= 0) && rem == 0 {
			if reset, err := time.Parse(time.RFC3339, h.Get(prefix+"-Reset")); err == nil {
				hold = max(hold, reset.Sub(now))
			}
		}
		if !rok || !lok || limit <= 0 {
			args = append(args, "", "", 0, "", 0, 0)
			continue
		}
		slack := 0.0
		if k != int(pace.Requests) && int64(rem)%1000 == 0 {
			slack = 500 // as pace's: the headers round token counts to thousands
		}
		base, given, unc := "", 0.0, 0.0
		if mine {
			base = strconv.FormatFloat(d.Spent()[k]+d.Cost.Of(pace.Kind(k)), 'f', -1, 64)
			given, unc = d.Given()[k], d.Uncounted(pace.Kind(k), status)
		}
		args = append(args, rem, limit, slack, base, given, unc)
	}
	if status == http.StatusTooManyRequests {
		wait := time.Second
		if d, ok := retry.After(h, now); ok && d > 0 {
			wait = d
		}
		hold = max(hold, wait)
	}
	hold = min(hold, b.maxHold)
	b.call(key, now, "observe", append([]any{hold.Milliseconds(), at}, args...)...)
}

// Levels is every key's buckets as the latest replies left them, for the
// metrics and the live view; on an outage, this replica's share.
func (b *Buckets) Levels(now time.Time) []pace.Level {
	if !b.out.Up() {
		return b.local.Levels(now)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []pace.Level
	for key, m := range b.mirror {
		for k := range pace.NumKinds {
			if m.uses(pace.Kind(k)) {
				out = append(out, pace.Level{Key: key, Kind: pace.Kind(k), Limit: m.limit[k], Level: m.levelAt(k, now)})
			}
		}
	}
	return out
}

// Shared reports whether the shared buckets are in force (Redis answers).
func (b *Buckets) Shared() bool { return b.out.Up() }
