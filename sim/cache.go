package sim

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/request"
)

// promptCache models prompt caching: entries keyed by the hash of a model
// and a canonical prompt prefix ending at a cache_control breakpoint, per
// workspace. Caches are per organisation and workspace on the API, so a
// prefix written with one key is read with another only when both are in
// one workspace: each x-api-key is a workspace of its own unless
// Config.Workspaces puts it in a named one (cacheScope). Requests without
// one (a bearer token) share one cache.
type promptCache struct {
	mu      sync.Mutex
	entries map[cacheKey]entry
}

// entry is one cached prefix: when it expires, and the ttl a hit
// refreshes it for.
type entry struct {
	exp time.Time
	ttl time.Duration
}

// cacheKey is one entry's key: the organisation's credential and the
// prefix's hash.
type cacheKey struct {
	org    string
	prefix [32]byte
}

func newPromptCache() *promptCache {
	return &promptCache{entries: map[cacheKey]entry{}}
}

// cacheScope is the workspace whose cache the request r reads and
// writes: the workspace its x-api-key is in (Config.Workspaces), else the
// key itself (a workspace of its own), or "" (one shared cache) without a
// key. Cache diagnostics are scoped alike.
func (s *Server) cacheScope(r *http.Request) string {
	key := r.Header.Get("X-Api-Key")
	if key == "" {
		return ""
	}
	if len(s.workspaceOf) > 0 {
		if ws, ok := s.workspaceOf[request.Tenant(http.Header{"X-Api-Key": {key}})]; ok {
			return "workspace\x00" + ws
		}
	}
	return "key\x00" + key
}

func (c *promptCache) reset() {
	c.mu.Lock()
	clear(c.entries)
	c.mu.Unlock()
}

func ttlOf(s string) time.Duration {
	if s == "1h" {
		return time.Hour
	}
	return 5 * time.Minute
}

// minCacheTokens is the shortest cacheable prefix for a model: the
// configured override for its kind (haiku or not) if set, else the
// model's documented minimum (request.CacheMinimum).
func (s *Server) minCacheTokens(model string) int {
	override := s.cfg.MinCacheTokens
	if strings.Contains(model, "haiku") {
		override = s.cfg.MinCacheTokensHaiku
	}
	if override > 0 {
		return override
	}
	return request.CacheMinimum(model)
}

// lookbackPositions is how many block boundaries each breakpoint checks
// for a live entry, counting its own: "The lookback window is 20 blocks.
// The system checks at most 20 positions per breakpoint, counting the
// breakpoint itself as the first" (the prompt-caching page).
const lookbackPositions = 20

// cacheRead is the entry a request reads: the prefix's tokens and key;
// zero tokens when it reads none.
type cacheRead struct {
	key    [32]byte
	tokens int
}

// lookup finds the longest live prefix the prompt can read, as the API
// looks for one: from each breakpoint, last first, back through up to
// lookbackPositions block boundaries; the first live entry found is the
// longest (a later breakpoint's window holds every position above an
// earlier one's). Entries exist only where some request put a breakpoint.
func (c *promptCache) lookup(p *prompt, org string, minTokens int, now time.Time) cacheRead {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(p.breakpoints) - 1; i >= 0; i-- {
		bp := p.breakpoints[i]
		for j := bp.pos; j >= 0 && j > bp.pos-lookbackPositions; j-- {
			pos := p.positions[j]
			if pos.tokens < minTokens {
				break // shorter prefixes are never cached
			}
			if e, ok := c.entries[cacheKey{org, pos.key}]; ok && now.Before(e.exp) {
				return cacheRead{key: pos.key, tokens: pos.tokens}
			}
		}
	}
	return cacheRead{}
}

// usageFor splits the prompt's tokens into cache reads (the longest live
// prefix lookup finds), cache writes (from there to the last breakpoint:
// writes happen only at breakpoints) and the uncached rest. It does not
// change the cache: entries appear only when a response begins (commit),
// which is also when the entry read is refreshed.
func (c *promptCache) usageFor(p *prompt, org string, minTokens int, now time.Time) (usage, cacheRead) {
	u := usage{InputTokens: p.total}
	bps := cacheable(p.breakpoints, minTokens)
	if len(bps) == 0 {
		return u, cacheRead{}
	}
	read := c.lookup(p, org, minTokens, now)
	prev := read.tokens
	u.CacheReadInputTokens = read.tokens
	for _, bp := range bps {
		if bp.tokens <= prev {
			continue
		}
		n := bp.tokens - prev
		if bp.ttl == "1h" {
			u.CacheCreation.Ephemeral1h += n
		} else {
			u.CacheCreation.Ephemeral5m += n
		}
		u.CacheCreationInputTokens += n
		prev = bp.tokens
	}
	u.InputTokens = p.total - prev
	return u, read
}

// commit creates or refreshes org's entries of every cacheable breakpoint,
// and refreshes the entry read (found by lookback, it may end where this
// request has no breakpoint) if it is still live.
func (c *promptCache) commit(p *prompt, org string, minTokens int, now time.Time, read cacheRead) {
	bps := cacheable(p.breakpoints, minTokens)
	if len(bps) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if read.tokens > 0 {
		k := cacheKey{org, read.key}
		if e, ok := c.entries[k]; ok && now.Before(e.exp) {
			c.entries[k] = entry{exp: now.Add(e.ttl), ttl: e.ttl}
		}
	}
	for _, bp := range bps {
		ttl := ttlOf(bp.ttl)
		if k := (cacheKey{org, bp.key}); now.Add(ttl).After(c.entries[k].exp) {
			c.entries[k] = entry{exp: now.Add(ttl), ttl: ttl}
		}
	}
	// Drop expired entries now and then so a long run does not grow forever.
	if len(c.entries) > 4096 {
		for k, e := range c.entries {
			if !now.Before(e.exp) {
				delete(c.entries, k)
			}
		}
	}
}

func cacheable(bps []breakpoint, minTokens int) []breakpoint {
	for i, bp := range bps {
		if bp.tokens >= minTokens {
			return bps[i:]
		}
	}
	return nil
}
