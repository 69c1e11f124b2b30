package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/dispatch"
	recording "github.com/sluicehq/sluice/record"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/statuswriter"
)

// record is what one request leaves in the access log and the metrics. The
// handlers fill it in as they learn things; ServeHTTP writes it out.
type record struct {
	start        time.Time
	id           string // sluice's request id
	upstreamID   string // the upstream's request-id
	model        string
	stream       bool
	windowed     bool
	wave         uint64
	queueWait    time.Duration
	upstreamTime time.Duration
	retries      int
	bytesIn      int64                  // request body bytes read from the client
	tenant       string                 // the Messages request's tenant (see TENANT_FROM)
	cache        dispatch.CacheStanding // what CACHE_AWARE made of it
	bucketWait   time.Duration          // how long RATE_LIMIT_PACING=buckets held it for its key's limits
	// missBlock and missTokens explain a cache write of its answer (see
	// cachewhy.go): the first block that differs, and the tokens it
	// could have read.
	missBlock  string
	missTokens int
	// member is the request's place in its wave, once it got a slot; set
	// only when an Observer is (for its timeline).
	member *dispatch.Member
	// parked says the request was parked (see park): its own goroutine
	// finishes it and calls account, not ServeHTTP.
	parked bool
	// span is the request's server span; nil when tracing is off (or for
	// a probe, which is not traced).
	span trace.Span
	// shape is the request's shape for RECORD_FILE; nil when the proxy
	// does not record (see record.go).
	shape *recording.Exchange
	// costUSD is what the answer's usage cost, cost how that was found
	// (listed, family, unknown, estimated; "" without a usage); cut says
	// a stream ended before its final usage, cutOutput its output tokens
	// estimated (see spend.go).
	costUSD   float64
	cost      string
	cut       bool
	cutOutput int64
}

type recordKey struct{}

// recordOf is r's record, or a throwaway one for a request that did not
// come through ServeHTTP (unit tests calling a handler directly).
func recordOf(r *http.Request) *record {
	if rec, ok := r.Context().Value(recordKey{}).(*record); ok {
		return rec
	}
	return &record{}
}

// sluiceIDHeader carries sluice's own request id on every response, so that
// a client's report can be matched to sluice's access line; the upstream's
// request-id passes through untouched.
const sluiceIDHeader = "X-Sluice-Request-Id"

// ServeHTTP routes r and, unless r was parked, writes its access line and
// request metric: the metric before the answer goes out, the access line
// after it when the answer declared its length (see deliver).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &record{id: newRequestID(), start: time.Now()}
	w.Header().Set(sluiceIDHeader, rec.id)
	sw := statuswriter.Wrap(w)
	r = r.WithContext(context.WithValue(r.Context(), recordKey{}, rec))
	if p.tracer != nil {
		r = p.startServerSpan(r, rec)
	}
	p.dropForwarded(r)
	if aerr := p.refuseRelay(r); aerr != nil {
		writeError(sw, closing(sw, aerr))
	} else if !isCleanPath(r.URL.Path) {
		// Go's mux would answer a plain-text redirect; a path with empty
		// or dot segments is nothing the API serves.
		writeError(sw, &apiError{Status: http.StatusNotFound, Type: "not_found_error",
			Message: "the path has empty or dot segments; send the API path as the SDKs do, such as /v1/messages"})
	} else {
		p.mux.ServeHTTP(sw, r)
	}
	if rec.parked {
		return // its answer is still to come; whoever finishes it accounts for it
	}
	line, logged := p.account(r, rec, sw.Status(), sw.Written())
	deliver(sw)
	if logged {
		p.logAccess(r, rec, line)
	}
}

// deliver sends an answer that declared its length (every answer of
// sluice's own, every whole Messages answer) to the client now, rather
// than when the handler returns, so that the access line is written off
// the latency path: after the client has its answer, not before. An
// answer without a declared length is left to net/http: flushing it early
// would turn the Content-Length net/http works out for a small body into
// chunked encoding, and a chunked answer (a stream) ends with its last
// chunk, which net/http writes only once the handler has returned.
func deliver(sw *statuswriter.Writer) {
	if sw.Status() != 0 && sw.Header().Get("Content-Length") != "" {
		sw.Flush()
	}
}

// accessFields are the parts of a request's access line that account
// works out, for logAccess to write once the answer is out.
type accessFields struct {
	route, mode string
	status      int
	bytesOut    int64
	end         time.Time
}

// account counts the request metric of r, whose answer is complete with
// status (0: nothing was sent) and bytesOut body bytes, ends its span and
// tells the observer of a Messages exchange; it returns the fields of its
// access line, and whether r has one (probes and scrapes do not). The
// caller writes the line with logAccess once the answer is on its way:
// the metric, the span and the observer are done first, so that a client
// that has its answer finds them counted.
func (p *Proxy) account(r *http.Request, rec *record, status int, bytesOut int64) (accessFields, bool) {
	end := time.Now()
	route := routeOf(r)
	if status == 0 {
		status = 499 // nothing was sent: the client left first
	}
	mode := "plain"
	if rec.windowed {
		mode = "windowed"
	}
	p.requestCounts.get(requestLabels{route, status, mode}, func(l requestLabels) prometheus.Counter {
		return p.metrics.Requests.WithLabelValues(l.route, strconv.Itoa(l.status), l.mode)
	}).Inc()
	if rec.span != nil {
		endServerSpan(rec, status, mode, end)
	}
	if p.obs != nil && route == "messages" {
		p.observeDone(r, rec, status, end)
	}
	p.recordDone(rec, status)
	if route == "healthz" || route == "readyz" || route == "metrics" {
		return accessFields{}, false // scrapes and probes would drown the access log
	}
	return accessFields{route: route, mode: mode, status: status, bytesOut: bytesOut, end: end}, true
}

// logAccess writes r's access line, with the fields account worked out;
// duration_ms runs to when the answer was complete, not to the write of
// the line.
func (p *Proxy) logAccess(r *http.Request, rec *record, f accessFields) {
	route, mode, status, bytesOut, end := f.route, f.mode, f.status, f.bytesOut, f.end
	// Never the body or any header but the two ids: keys and tokens stay
	// out. client_addr is the TCP peer: X-Forwarded-For is whatever the
	// client says it is.
	p.log.LogAttrs(r.Context(), slog.LevelInfo, "request",
		slog.String("id", rec.id), slog.String("upstream_request_id", rec.upstreamID),
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("route", route),
		slog.String("mode", mode), slog.String("tenant", rec.tenant), slog.String("model", rec.model), slog.Bool("stream", rec.stream),
		slog.Int("status", status), slog.String("client_addr", r.RemoteAddr),
		slog.Int64("bytes_in", rec.bytesIn), slog.Int64("bytes_out", bytesOut),
		slog.Float64("queue_wait_ms", millis(rec.queueWait)), slog.Float64("upstream_ms", millis(rec.upstreamTime)),
		slog.Uint64("wave", rec.wave), slog.Int("retries", rec.retries),
		slog.String("cache", rec.cache.Role.String()), slog.Float64("cache_hold_ms", millis(rec.cache.Held)),
		slog.String("cache_miss_block", rec.missBlock), slog.Int("cache_miss_tokens", rec.missTokens),
		slog.Float64("bucket_wait_ms", millis(rec.bucketWait)),
		slog.Float64("cost_usd", rec.costUSD), slog.String("cost", rec.cost),
		slog.Float64("duration_ms", millis(end.Sub(rec.start))))
}

// millis is d in milliseconds to the microsecond, as the access line gives
// durations: a number any log tool can sum, with its unit in the key.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// routeOf names r's route for the metrics; a fixed set, whatever the path.
func routeOf(r *http.Request) string {
	switch r.URL.Path {
	case "/v1/messages":
		return "messages"
	case "/healthz":
		return "healthz"
	case "/readyz":
		return "readyz"
	case "/metrics":
		return "metrics"
	case "/":
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			return "root" // answered by sluice (see Proxy.root), not relayed
		}
	}
	if strings.HasPrefix(r.URL.Path, "/v1/bulk/") {
		return "bulk"
	}
	return "relay"
}

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
	if model == "" {
		model = "unknown"
	}
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

// countMessageTokens reads model and usage from a JSON Messages response
// (in one walk that skips the content: encoding/json's decode was a
// twentieth of the plain path's CPU).
func (ex *exchange) countMessageTokens(data []byte) {
	if model, u, ok := request.ParseAnswer(data); ok {
		ex.countTokens(model, usage{Input: u.Input, Output: u.Output, CacheWrite: u.CacheWrite, CacheRead: u.CacheRead, CacheWrite1h: u.CacheWrite1h})
	}
}

// countTokens adds the usage u of ex's answer to the token counters and,
// for a follower under CACHE_AWARE, what its cache read saved: without its
// hold it would have written the prefix it read, at the write price of its
// prefix's TTL, instead of reading it at the cache read price.
func (ex *exchange) countTokens(model string, u usage) {
	ex.p.countTokens(model, u)
	ex.charge(model, u)
	ex.rec.recordUsage(u)
	if ex.member != nil {
		ex.member.Used(dispatch.Usage{Input: int(u.Input), CacheWrite: int(u.CacheWrite), Output: int(u.Output)})
	}
	if ex.tenant != "" {
		ex.p.tenants.AddTokens(ex.tenant, u.Input+u.Output)
	}
	ex.explainWrite(u)
	if ex.member != nil {
		ex.member.CacheRead(int(u.CacheRead))
	}
	if ex.rec.cache.Role != dispatch.CacheFollower || u.CacheRead <= 0 {
		return
	}
	e, _ := ex.p.spend.Prices().Lookup(model)
	write := e.CacheWrite5m
	if ps := ex.desc.Prefixes; len(ps) > 0 && ps[len(ps)-1].TTL >= time.Hour {
		write = e.CacheWrite1h
	}
	ex.p.metrics.CacheSavings.Add(float64(u.CacheRead) * (write - e.CacheRead) / 1e6)
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

var (
	evMessageStart = []byte("event: message_start")
	evMessageDelta = []byte("event: message_delta")
	// evContentBlockDelta opens an event that carries the answer's
	// tokens: the first one is the stream's first token.
	evContentBlockDelta = []byte("event: content_block_delta")
	// evPing opens a keep-alive event, which carries nothing.
	evPing = []byte("event: ping")
	// evMessageStop and evError open the events that end a stream.
	evMessageStop = []byte("event: message_stop")
	evError       = []byte("event: error")
	dataPrefix    = []byte("data:")
)

func (s *streamUsage) observe(ev []byte) {
	start := bytes.HasPrefix(ev, evMessageStart)
	if !start && !bytes.HasPrefix(ev, evMessageDelta) {
		if bytes.HasPrefix(ev, evContentBlockDelta) {
			s.deltas, s.deltaBytes = s.deltas+1, s.deltaBytes+int64(len(ev))
		}
		return
	}
	i := bytes.Index(ev, dataPrefix)
	if i < 0 {
		return
	}
	data := ev[i+len(dataPrefix):]
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

// isCleanPath reports whether p is an absolute path without empty or dot
// segments (a trailing slash is allowed).
func isCleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	return clean == p
}
