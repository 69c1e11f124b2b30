package proxy

import (
	"github.com/sluicehq/sluice/cachewhy"
)

// explainWrite counts why ex's answer, of usage u, wrote to the prompt
// cache (if it did), on both paths: the first block of its prompt that
// differs from the recent prompt sharing the most leading blocks, and the
// tokens of that shared run it did not read. The usage is the signal, not
// sluice's expectation: a warm request can write too (what follows the
// prefix it read), and a leader can write nothing (the API had the entry).
func (ex *exchange) explainWrite(u usage) {
	if u.CacheWrite <= 0 || ex.why.Block == "" {
		return
	}
	unread := ex.why.Unread(int(u.CacheRead))
	ex.rec.missBlock, ex.rec.missTokens = ex.why.Block, unread
	p := ex.p
	p.why.Wrote(ex.why, unread)
	p.metrics.CacheMissBlock.WithLabelValues(ex.why.Label).Inc()
	p.metrics.CacheMissTokens.WithLabelValues(ex.why.Label).Add(float64(unread))
}

// CacheWrites is why answers wrote to the prompt cache since start, by
// block, the most unread tokens first (for the page).
func (p *Proxy) CacheWrites() []cachewhy.Stat { return p.why.Stats() }
