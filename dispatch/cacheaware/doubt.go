package cacheaware

import (
	"time"

	"github.com/sluicehq/sluice/dispatch"
)

// Defaults of Release's check on its own belief.
const (
	// DefaultDoubtGroups is how many groups in a row whose followers read
	// none of their prefix make Release stop holding on it: one such
	// group can be bad luck (an entry evicted early), three are a prefix
	// the API does not cache as sluice believes.
	DefaultDoubtGroups = 3
	// DefaultDoubtCoolOff is how long a prefix is not held on, unless a
	// request is seen to read it first; then one more group is let form
	// to try it again.
	DefaultDoubtCoolOff = 10 * time.Minute
)

// Doubt is news of Release's belief about one prefix: it stopped
// holding on it (Trusted false), or holds on it again, having seen a
// request read it (Trusted true).
type Doubt struct {
	Key     uint64
	Tokens  int       // the prefix's estimated tokens
	Groups  int       // groups in a row whose followers read none of it
	Trusted bool      // held on again
	Until   time.Time // not held on until then (Trusted false)
}

// doubt is what Release knows of one prefix's groups.
type doubt struct {
	unread int       // groups in a row whose followers read none of it
	until  time.Time // not held on until then
}

// cacheGroup is the followers a leader's beginning freed together: the
// first of them to report a read that does not reach the prefix counts
// the group as unread, once.
type cacheGroup struct {
	key     uint64
	tokens  int
	counted bool
}

// Used hears the usage of m's answer, its cache_read_input_tokens, to
// check the release's belief: a follower freed by its leader's beginning
// should have read its prefix, and if the followers of DoubtGroups groups
// in a row read none of it, the release stops holding on it (see
// Release.DoubtGroups). A read counts as of the prefix when it passes
// the request's next shorter cacheable prefix (estimated tokens): a read
// of that one alone says nothing of this one. It is a dispatch.Learner,
// called from any goroutine once the usage is known.
func (c *Release) Used(m *dispatch.Member, u dispatch.Usage) {
	if pl := placeNote.Peek(m); pl != nil && pl.c == c {
		c.read(pl, u.CacheRead)
	}
}

// read is Used, for a member c placed.
func (c *Release) read(pl *cachePlace, tokens int) {
	var news []Doubt
	now := time.Now()
	c.mu.Lock()
	switch g := pl.group; {
	case g != nil && tokens > pl.floor:
		news = c.trust(g.key, g.tokens, news)
	case g != nil && !g.counted:
		g.counted = true
		news = c.unread(g, now, news)
	case g == nil && pl.probe != nil && tokens > pl.probeFloor:
		news = c.trust(pl.probe.key, pl.probe.tokens, news)
	}
	c.mu.Unlock()
	if c.Doubted != nil {
		for _, d := range news {
			c.Doubted(d)
		}
	}
}

// unread counts g as a group whose followers read none of its prefix,
// and stops holding on it at the threshold. c.mu is held.
func (c *Release) unread(g *cacheGroup, now time.Time, news []Doubt) []Doubt {
	d := c.doubtOf(g.key)
	d.unread++
	if d.unread < c.doubtGroups() || d.until.After(now) {
		return news
	}
	cool := c.DoubtCoolOff
	if cool <= 0 {
		cool = DefaultDoubtCoolOff
	}
	d.until = now.Add(cool)
	return append(news, Doubt{Key: g.key, Tokens: g.tokens, Groups: d.unread, Until: d.until})
}

// trust clears key's doubts, a request having read it. c.mu is held.
func (c *Release) trust(key uint64, tokens int, news []Doubt) []Doubt {
	d := c.doubts[key]
	if d == nil {
		return news
	}
	delete(c.doubts, key)
	if d.unread >= c.doubtGroups() {
		news = append(news, Doubt{Key: key, Tokens: tokens, Groups: d.unread, Trusted: true})
	}
	return news
}

// doubtOf is key's doubt, made if need be; the doubts are bounded as the
// registry is, a prefix not held off now going first. c.mu is held.
func (c *Release) doubtOf(key uint64) *doubt {
	if d := c.doubts[key]; d != nil {
		return d
	}
	if c.doubts == nil {
		c.doubts = map[uint64]*doubt{}
	}
	if len(c.doubts) >= c.maxPrefixes() {
		victim, now := uint64(0), time.Now()
		for k, d := range c.doubts {
			victim = k
			if !d.until.After(now) {
				break
			}
		}
		delete(c.doubts, victim)
	}
	d := &doubt{}
	c.doubts[key] = d
	return d
}

// distrusted reports whether key is not held on at now. c.mu is held.
func (c *Release) distrusted(key uint64, now time.Time) bool {
	d := c.doubts[key]
	return d != nil && d.until.After(now)
}

func (c *Release) doubtGroups() int {
	if c.DoubtGroups > 0 {
		return c.DoubtGroups
	}
	return DefaultDoubtGroups
}

// Distrusted is how many prefixes are not held on now, for a gauge.
func (c *Release) Distrusted() int {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, d := range c.doubts {
		if d.until.After(now) {
			n++
		}
	}
	return n
}
