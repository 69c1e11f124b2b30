package proxy

import "sync"

// children caches the children of a metric vector by their label values,
// for the few vectors every request counts in (sluice_requests_total, the
// upstream duration, the tokens): a map lookup under a read lock instead
// of client_golang hashing and validating the label values on each call,
// which with strconv.Itoa's string for the status was about 2 % of a
// request's CPU. A child is made on its first use, as WithLabelValues
// makes it, so /metrics shows no series before its first request; nothing
// deletes these vectors' children, so a cached child is never stale.
type children[K comparable, M any] struct {
	mu sync.RWMutex
	m  map[K]M
}

// get is k's child, made by newChild the first time.
func (c *children[K, M]) get(k K, newChild func(K) M) M {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[k]; ok { // made meanwhile
		return v
	}
	if c.m == nil {
		c.m = map[K]M{}
	}
	v = newChild(k)
	c.m[k] = v
	return v
}

// requestLabels are sluice_requests_total's label values.
type requestLabels struct {
	route  string
	status int
	mode   string
}

// tokenLabels are sluice_tokens_total's label values.
type tokenLabels struct{ model, kind string }
