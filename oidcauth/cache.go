package oidcauth

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/sluicehq/sluice/request"
)

// cache remembers verified tokens by their SHA-256 until each expires.
// It holds at most size: when full, expired entries go first, then
// arbitrary ones (a token forgotten is only checked again).
type cache struct {
	mu      sync.Mutex
	size    int
	entries map[[sha256.Size]byte]cached
}

type cached struct {
	rec *request.Inbound
	exp time.Time
}

func newCache(size int) *cache {
	return &cache{size: size, entries: make(map[[sha256.Size]byte]cached)}
}

func (c *cache) get(sum [sha256.Size]byte, now time.Time) (*request.Inbound, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[sum]
	if !ok {
		return nil, false
	}
	if !now.Before(e.exp) {
		delete(c.entries, sum)
		return nil, false
	}
	return e.rec, true
}

func (c *cache) put(sum [sha256.Size]byte, rec *request.Inbound, exp, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.size {
		for k, e := range c.entries {
			if !now.Before(e.exp) {
				delete(c.entries, k)
			}
		}
		// An eighth goes at once, so that a full cache is swept once per
		// size/8 puts, not on every one.
		for k := range c.entries {
			if len(c.entries) < c.size-c.size/8 {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[sum] = cached{rec: rec, exp: exp}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
