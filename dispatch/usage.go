package dispatch

// What an answer says it spent, and the policies that learn from it.

// Usage is what an answer says it spent: of the limits, and of the cache.
type Usage struct {
	Input      int // uncached input tokens
	CacheWrite int // tokens written to the cache: they count as input
	Output     int
	CacheRead  int // tokens read from the cache (cache_read_input_tokens)
}

// A Learner is a policy that learns from each answer's usage (the
// cache-aware release checks its belief about a prefix by the followers'
// reads). Config.Learners lists them; the pacing is told first. Used is
// called from any goroutine, once per answer whose usage is known, which
// for a whole JSON answer may be after the member has ended; it must not
// block.
type Learner interface {
	Used(m *Member, u Usage)
}

// Used reports the usage of the member's answer: the pacing corrects its
// debit of its key's rate limits, and each of Config.Learners learns from
// it. The proxy calls it once it has read the usage.
func (m *Member) Used(u Usage) {
	if m.s.pacing != nil {
		m.s.pacing.Used(m, u)
	}
	for _, l := range m.s.learners {
		l.Used(m, u)
	}
}
