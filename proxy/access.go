package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	recording "github.com/sluicehq/sluice/record"
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
	backend      string              // the backend key that served it, by name ("primary/2"); "" without backends
	failovers    int                 // keys it left for another before this one
	bytesIn      int64               // request body bytes read from the client
	tenant       string              // the Messages request's tenant (see TENANT_FROM)
	cache        cacheaware.Standing // what CACHE_AWARE made of it
	bucketWait   time.Duration       // how long RATE_LIMIT_PACING=buckets held it for its key's limits
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
	// clientCut says why a stream's client was cut for its reading
	// (streamPipe.cutFor); "" if it was not.
	clientCut string
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
// request-id passes through untouched. It is the error package's, which
// writes the same id into sluice's own errors.
const sluiceIDHeader = apierror.SluiceIDHeader

// ServeHTTP routes r and, unless r was parked, writes its access line and
// request metric: the metric before the answer goes out, the access line
// after it when the answer declared its length (see deliver).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &record{id: apierror.NewRequestID(), start: time.Now()}
	w.Header().Set(sluiceIDHeader, rec.id)
	sw := statuswriter.Wrap(w)
	r = r.WithContext(context.WithValue(r.Context(), recordKey{}, rec))
	if p.tracer != nil {
		r = p.startServerSpan(r, rec)
	}
	p.dropForwarded(r)
	if aerr := p.refuseRelay(r); aerr != nil {
		apierror.WriteSluice(sw, closing(sw, aerr))
	} else if !isCleanPath(r.URL.Path) {
		// Go's mux would answer a plain-text redirect; a path with empty
		// or dot segments is nothing the API serves.
		apierror.WriteSluice(sw, &apierror.Error{Status: http.StatusNotFound, Type: "not_found_error",
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
	p.drainRefused(sw, r, sw.Status())
	if sw.Status() == 0 {
		// Nothing was answered: the client left first (a FIN, which a
		// client that only half-closed its side sends too). net/http would
		// send an empty 200, a success that holds nothing; the connection
		// is closed instead, with no answer (net/http logs nothing for
		// this panic).
		panic(http.ErrAbortHandler)
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
		slog.String("backend", rec.backend), slog.Int("failovers", rec.failovers),
		slog.String("cache", rec.cache.Role.String()), slog.Float64("cache_hold_ms", millis(rec.cache.Held)),
		slog.String("cache_miss_block", rec.missBlock), slog.Int("cache_miss_tokens", rec.missTokens),
		slog.Float64("bucket_wait_ms", millis(rec.bucketWait)),
		slog.Float64("cost_usd", rec.costUSD), slog.String("cost", rec.cost),
		slog.String("client_cut", rec.clientCut),
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
