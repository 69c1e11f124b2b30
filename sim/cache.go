package sim

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/request"
)

// promptCache models prompt caching: entries keyed by the hash of a model
// and a canonical prompt prefix ending at a cache_control breakpoint.
type promptCache struct {
	mu      sync.Mutex
	entries map[[32]byte]time.Time // expiry
}

func newPromptCache() *promptCache {
	return &promptCache{entries: map[[32]byte]time.Time{}}
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

// usageFor splits the prompt's tokens into cache reads (the longest prefix
// with a live entry), cache writes (from there to the last breakpoint) and
// the uncached rest. It does not change the cache: entries appear only when
// a response begins (commit).
func (c *promptCache) usageFor(p *prompt, minTokens int, now time.Time) usage {
	u := usage{InputTokens: p.total}
	bps := cacheable(p.breakpoints, minTokens)
	if len(bps) == 0 {
		return u
	}
	c.mu.Lock()
	hit := -1
	for i := len(bps) - 1; i >= 0; i-- {
		if exp, ok := c.entries[entryKey(p, bps[i])]; ok && now.Before(exp) {
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

// commit creates or refreshes the entries of every cacheable breakpoint.
func (c *promptCache) commit(p *prompt, minTokens int, now time.Time) {
	bps := cacheable(p.breakpoints, minTokens)
	if len(bps) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, bp := range bps {
		exp := now.Add(ttlOf(bp.ttl))
		if k := entryKey(p, bp); exp.After(c.entries[k]) {
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

// entryKey is bp's entry in the cache of p's scope: its own key in the
// shared cache, else that key hashed with the scope's credential.
func entryKey(p *prompt, bp breakpoint) [32]byte {
	if p.scope == "" {
		return bp.key
	}
	return sha256.Sum256(append([]byte(p.scope+"\x00"), bp.key[:]...))
}

// credentialOf is the credential r carries, whose cache it uses under
// CachePerKey (as its rate limits are that credential's).
func credentialOf(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	return r.Header.Get("Authorization")
}

func cacheable(bps []breakpoint, minTokens int) []breakpoint {
	for i, bp := range bps {
		if bp.tokens >= minTokens {
			return bps[i:]
		}
	}
	return nil
}
