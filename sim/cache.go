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
// organisation. Caches are per organisation (and workspace) on the API,
// so a prefix written with one key is not read with a key of another:
// each x-api-key stands for an organisation of its own, as it does for
// the rate limits (ratelimit.go). Requests without one (a bearer token, a
// cloud's signature that changes with every call) share one cache.
type promptCache struct {
	mu      sync.Mutex
	entries map[cacheKey]time.Time // expiry
}

// cacheKey is one entry's key: the organisation's credential and the
// prefix's hash.
type cacheKey struct {
	org    string
	prefix [32]byte
}

func newPromptCache() *promptCache {
	return &promptCache{entries: map[cacheKey]time.Time{}}
}

// cacheOrg is the organisation whose cache the request r reads and
// writes: its x-api-key, or "" (one shared cache) without one.
func cacheOrg(r *http.Request) string { return r.Header.Get("X-Api-Key") }

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

// usageFor splits the prompt's tokens into cache reads (the longest prefix
// with a live entry), cache writes (from there to the last breakpoint) and
// the uncached rest. It does not change the cache: entries appear only when
// a response begins (commit).
func (c *promptCache) usageFor(p *prompt, org string, minTokens int, now time.Time) usage {
	u := usage{InputTokens: p.total}
	bps := cacheable(p.breakpoints, minTokens)
	if len(bps) == 0 {
		return u
	}
	c.mu.Lock()
	hit := -1
	for i := len(bps) - 1; i >= 0; i-- {
		if exp, ok := c.entries[cacheKey{org, bps[i].key}]; ok && now.Before(exp) {
			hit = i
			break
		}
	}
	c.mu.Unlock()
	prev := 0
	if hit >= 0 {
		prev = bps[hit].tokens
		u.CacheReadInputTokens = prev
	}
	for _, bp := range bps[hit+1:] {
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
	return u
}

// commit creates or refreshes org's entries of every cacheable breakpoint.
func (c *promptCache) commit(p *prompt, org string, minTokens int, now time.Time) {
	bps := cacheable(p.breakpoints, minTokens)
	if len(bps) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, bp := range bps {
		exp := now.Add(ttlOf(bp.ttl))
		if k := (cacheKey{org, bp.key}); exp.After(c.entries[k]) {
			c.entries[k] = exp
		}
	}
	// Drop expired entries now and then so a long run does not grow forever.
	if len(c.entries) > 4096 {
		for k, exp := range c.entries {
			if !now.Before(exp) {
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
