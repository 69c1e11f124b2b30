package proxy

import (
	"bytes"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sse"
)

// What an answer's usage teaches: a whole answer's is read once it is
// written (writeReply), a stream's tallied as its events pass and read
// when it ends (relayEvents); both go to used.

// usage is a response's token usage, as the API reports it.
type usage struct {
	Input      int64 `json:"input_tokens"`
	Output     int64 `json:"output_tokens"`
	CacheWrite int64 `json:"cache_creation_input_tokens"`
	CacheRead  int64 `json:"cache_read_input_tokens"`
	// CacheWrite1h is the part of CacheWrite of the 1-hour TTL.
	CacheWrite1h int64 `json:"-"`
}

// countTokens adds u to the token counters for model.
func (p *Proxy) countTokens(model string, u usage) {
	model = p.tokenModels.label(model)
	for _, kv := range []struct {
		kind string
		n    int64
	}{{"input", u.Input}, {"output", u.Output}, {"cache_write", u.CacheWrite}, {"cache_read", u.CacheRead}} {
		if kv.n > 0 {
			p.tokenCounts.get(tokenLabels{model, kv.kind}, func(l tokenLabels) prometheus.Counter {
				return p.metrics.Tokens.WithLabelValues(l.model, l.kind)
			}).Add(float64(kv.n))
		}
	}
}

// maxTokenModels bounds sluice_tokens_total's model label values: the
// model is the upstream's answer's, which sluice does not choose, and an
// upstream (or a gateway before it) that names models without end must
// not grow /metrics without end. Past it a new model counts as "other".
const maxTokenModels = 64

// modelLabels are the model label values sluice_tokens_total has taken.
type modelLabels struct {
	mu   sync.RWMutex
	seen map[string]struct{}
}

// label is model's label value: itself (at most request.MaxModelLabel
// bytes) while fewer than maxTokenModels models were seen, "unknown" for
// none, and "other" past the bound.
func (ml *modelLabels) label(model string) string {
	if model == "" {
		return "unknown"
	}
	model = request.Cut(model, maxModelLabel)
	ml.mu.RLock()
	_, ok := ml.seen[model]
	ml.mu.RUnlock()
	if ok {
		return model
	}
	ml.mu.Lock()
	defer ml.mu.Unlock()
	if _, ok := ml.seen[model]; ok {
		return model
	}
	if len(ml.seen) >= maxTokenModels {
		return "other"
	}
	if ml.seen == nil {
		ml.seen = map[string]struct{}{}
	}
	ml.seen[model] = struct{}{}
	return model
}

// maxModelLabel bounds one model label value's length, as the request's
// model is bounded when it is read.
const maxModelLabel = 128

// countMessageTokens reads model and usage from a JSON Messages response
// (in one walk that skips the content: encoding/json's decode was a
// twentieth of the plain path's CPU).
func (ex *exchange) countMessageTokens(data []byte) {
	if model, u, ok := request.ParseAnswer(data); ok {
		ex.used(model, usage{Input: u.Input, Output: u.Output, CacheWrite: u.CacheWrite, CacheRead: u.CacheRead, CacheWrite1h: u.CacheWrite1h})
	}
}

// used is what the usage u of ex's answer teaches: its key's rate-limit
// debit is corrected to it (RATE_LIMIT_PACING=buckets), its tenant is
// charged its tokens, the cache-aware release learns whether its prefix
// was read, and the token counters, the access line and the explanation
// of a cache write get their figures. For a follower under CACHE_AWARE it
// also counts what its cache read saved: without its hold it would have
// written the prefix it read, at the write price of its prefix's TTL,
// instead of reading it at the cache read price.
func (ex *exchange) used(model string, u usage) {
	// A count the API never reports (negative, or past any context
	// window; a broken upstream might) is held in range: a negative one
	// would refund the key's rate-limit debit and the tenant's tokens and
	// show a negative cost, a huge one wrap their sums.
	u = usage{Input: price.Count(u.Input), Output: price.Count(u.Output), CacheWrite: price.Count(u.CacheWrite),
		CacheRead: price.Count(u.CacheRead), CacheWrite1h: price.Count(u.CacheWrite1h)}
	ex.p.countTokens(model, u)
	ex.charge(model, u)
	ex.rec.recordUsage(u)
	ex.turn.used(u)
	if ex.tenant != "" {
		ex.p.tenants.AddTokens(ex.tenant, u.Input+u.Output)
	}
	ex.explainWrite(u)
	if ex.key != nil {
		ex.p.routes.CacheRead(ex.key, u.CacheRead)
	}
	if ex.rec.cache.Role != cacheaware.CacheFollower || u.CacheRead <= 0 {
		return
	}
	e, _ := ex.p.spend.Prices().Lookup(model)
	write := e.CacheWrite5m
	if ps := ex.desc.Prefixes; len(ps) > 0 && ps[len(ps)-1].TTL >= time.Hour {
		write = e.CacheWrite1h
	}
	// A [prices] row may price a read above a write: then it saved
	// nothing (a counter's Add of less panics).
	ex.p.metrics.CacheSavings.Add(float64(u.CacheRead) * max(write-e.CacheRead, 0) / 1e6)
}

// streamUsage tallies usage over a stream's events: message_start carries
// the model and the input side, each message_delta the cumulative output.
// Only those two events are decoded, so the cost per stream is small.
type streamUsage struct {
	model string
	u     usage
	seen  bool
	// final says a message_delta came; deltas and deltaBytes count the
	// content_block_delta events, for estimate.
	final              bool
	deltas, deltaBytes int64
}

func (s *streamUsage) observe(ev []byte) {
	start := bytes.HasPrefix(ev, sse.MessageStart)
	if !start && !bytes.HasPrefix(ev, sse.MessageDelta) {
		if bytes.HasPrefix(ev, sse.ContentBlockDelta) {
			s.deltas, s.deltaBytes = s.deltas+1, s.deltaBytes+int64(len(ev))
		}
		return
	}
	i := bytes.Index(ev, sse.DataPrefix)
	if i < 0 {
		return
	}
	data := ev[i+len(sse.DataPrefix):]
	if j := bytes.IndexByte(data, '\n'); j >= 0 {
		data = data[:j]
	}
	// Read in one walk each, as a whole answer is (countMessageTokens):
	// encoding/json's decode of the two was a sixteenth of a stream's CPU.
	if start {
		msg, ok := request.MemberOf(data, "message")
		if !ok {
			return
		}
		var model string
		var u request.Usage
		if msg != nil && string(msg) != "null" { // without its message: no usage, as encoding/json read it
			if model, u, ok = request.ParseAnswer(msg); !ok {
				return
			}
		}
		s.seen = true
		s.model, s.u = model, usage{Input: u.Input, Output: u.Output, CacheWrite: u.CacheWrite, CacheRead: u.CacheRead, CacheWrite1h: u.CacheWrite1h}
		return
	}
	_, u, ok := request.ParseAnswer(data)
	if !ok {
		return
	}
	s.seen, s.final = true, true
	// message_delta's usage is cumulative; input fields appear there only
	// on newer API versions.
	s.u.Output = u.Output
	if u.Input > 0 {
		s.u.Input = u.Input
	}
	if u.CacheWrite > 0 {
		s.u.CacheWrite = u.CacheWrite
	}
	if u.CacheRead > 0 {
		s.u.CacheRead = u.CacheRead
	}
	if u.CacheWrite1h > 0 {
		s.u.CacheWrite1h = u.CacheWrite1h
	}
}
