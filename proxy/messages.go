package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/cachewhy"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/park"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/retry"
	"github.com/sluicehq/sluice/upstream"
)

// messages handles POST /v1/messages: windowed when BATCH_ENABLED, else
// forwarded at once.
func (p *Proxy) messages(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, errMethod("POST"))
		return
	}
	// Shed before reading the body when the queue is already full: under
	// overload the cheapest answer is the best one. The scheduler's
	// admission enforces the cap exactly; this only saves the read.
	rec := recordOf(r)
	rec.windowed = p.sched != nil
	if p.sched != nil && p.sched.Full() {
		p.metrics.Shed.Inc()
		writeError(w, p.mapError(dispatch.ErrQueueFull))
		return
	}
	// The body is read before queuing: Go's server only notices a client
	// that hangs up once the handler has consumed the request body.
	body, ok := p.takeBody(w, r)
	if !ok {
		return
	}
	info, blocks, aerr := inspect(body.data, r.Header)
	if info.Inbound = inboundOf(r); aerr == nil && !allowsModel(info.Inbound, info.Model) {
		aerr = errModelNotAllowed(info.Inbound, info.Model)
	}
	if aerr != nil {
		p.bodies.release(body.reserved)
		writeError(w, aerr)
		return
	}
	info.Tenant, info.Class = p.tenants.Identify(info, r.Header)
	rec.model, rec.stream, rec.bytesIn, rec.tenant = info.Model, info.Stream, int64(len(body.data)), info.Tenant
	p.recordArrival(rec, body.data, &info)
	ex := &exchange{p: p, w: w, r: r, body: body, rec: rec, desc: info, why: p.why.Explain(blocks)}
	if p.sched == nil {
		ctx := p.begin(r.Context(), &ex.serving)
		defer p.end(&ex.serving)
		defer ex.releaseBody() // even if forward panics: net/http recovers the handler, not the budget
		ex.complete(ctx, ex.forward(ctx, nil))
		return
	}
	p.budget.Request()
	// A request with many ahead of it will wait long for its turn: park
	// it, so that it waits without net/http's connection goroutine and
	// buffers (see park). r's body is spent; dropping it lets go of the
	// server's read buffer, which it points into, for as long as r is kept.
	r.Body = http.NoBody
	if p.parkWhen >= 0 && p.sched.Queued() < p.parkWhen {
		p.waitInPlace(ex) // its turn is near: not worth the takeover
		return
	}
	rw, err := p.parker.Park(w, r)
	switch {
	case errors.Is(err, park.ErrNotParkable): // HTTP/2, say
		p.waitInPlace(ex)
		return
	case err != nil:
		// The connection was taken over and then found unusable (a
		// listener serving TLS, say): there is nobody left to answer.
		p.bodies.release(body.reserved)
		p.log.Error("parking failed; the connection is closed", "err", err)
		return
	}
	rec.parked = true
	ex.w = rw
	// From here no goroutine waits for this request: the scheduler calls
	// back when it is over, from the goroutine its call ran on.
	ctx := p.begin(rw.Context(), &ex.serving)
	over := func(err error) { defer p.end(&ex.serving); defer ex.releaseBody(); p.settleParked(ctx, ex, rw, err) }
	if err := p.sched.Start(ctx, p.describe(ex), ex.forward, over); err != nil {
		over(err) // not admitted: answered at once
	}
}

// waitInPlace sends ex through the scheduler on the handler's own
// goroutine, and answers it.
func (p *Proxy) waitInPlace(ex *exchange) {
	ctx := p.begin(ex.r.Context(), &ex.serving)
	defer p.end(&ex.serving)
	defer ex.releaseBody()
	p.settle(ctx, ex, p.sched.Do(ctx, p.describe(ex), ex.forward))
}

// settleParked is settle for a parked request, which then lets its
// connection go.
func (p *Proxy) settleParked(ctx context.Context, ex *exchange, rw *park.Response, err error) {
	defer func() {
		if v := recover(); v != nil { // outside the scheduler's containment of fn: nobody else would catch it
			p.log.Error("parked request panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if rw.Status() == 0 && ctx.Err() == nil {
				writeError(rw, &apiError{Status: http.StatusInternalServerError, Type: "api_error",
					Message: "sluice hit an internal error handling this request; retry, and report it if it persists"})
			}
		}
		// Counted before Finish sends the last buffered bytes (Finish
		// answers 200 to a request that got nothing), the access line
		// written after, as ServeHTTP does: off the latency path.
		line, logged := p.account(ex.r, ex.rec, rw.Status(), rw.Written())
		rw.Finish()
		if logged {
			p.logAccess(ex.r, ex.rec, line)
		}
	}()
	p.settle(ctx, ex, err)
}

// settle answers a windowed request whose passage through the scheduler
// ended with err, and counts how it ended; ctx ends when its client
// leaves.
func (p *Proxy) settle(ctx context.Context, ex *exchange, err error) {
	if err != nil {
		p.countFailure(ctx, err)
	}
	ex.rec.retries = ex.retries
	ex.complete(ctx, err)
}

// countFailure counts how a windowed request that failed with err ended.
// Apart from settle: errors.As's targets escape, and declared in settle
// they cost two allocations on every request, answered or not.
func (p *Proxy) countFailure(ctx context.Context, err error) {
	var tooLong *dispatch.WaitTooLongError
	var tenantFull *dispatch.TenantFullError
	switch {
	case errors.Is(err, dispatch.ErrQueueFull), errors.As(err, &tooLong), errors.As(err, &tenantFull):
		p.metrics.Shed.Inc()
	case errors.Is(err, dispatch.ErrDeadline):
		p.metrics.Deadlines.Inc()
	case ctx.Err() != nil && context.Cause(ctx) != errShuttingDown:
		p.metrics.Departed.Inc()
	}
}

// exchange is one Messages request on its way through sluice.
type exchange struct {
	p       *Proxy
	w       http.ResponseWriter
	r       *http.Request
	body    heldBody
	rec     *record
	retries int // attempts after the first

	// What forward leaves for complete. At most one is set.
	reply *reply      // a whole answer, written once the slot is given back
	out   *streamPipe // a stream, being written to the client already
	// last is the latest retryable answer from the upstream: when sluice
	// runs out of time to retry, the client gets it rather than a timeout
	// of sluice's own for a wait the upstream caused.
	last *reply
	desc request.Descriptor // what the policies know of the request
	// why is what would explain a cache write of its answer (see
	// cachewhy.go).
	why cachewhy.Finding
	// member is its place in its wave, on the windowed path once it got a
	// slot: its answer's usage corrects its key's rate-limit debit.
	member *dispatch.Member
	// tenant is the tenant the scheduler counts the request under (the
	// request's, or dispatch.OtherTenant); "" on the plain path.
	tenant string
	// streamed is the body sent upstream instead of body's when a
	// non-streaming request leads a cold prefix (see reassemble.go).
	streamed []byte
	sent     time.Time // when the latest upstream attempt was sent
	// cancelCall cancels the context of forward's upstream call, with a
	// cause: errUpstreamTimeout on the plain path (see attempt).
	cancelCall context.CancelCauseFunc
	// serving lists the request among those Abort cuts (see begin).
	serving inFlight
}

// reply is a whole upstream answer, read while the request held its slot.
type reply struct {
	status int
	header http.Header
	data   []byte
}

// forward fetches the answer to the request from the upstream under ctx:
// on the windowed path while the request holds its slot (m is its place
// in its wave; nil on the plain path). A whole answer is left in ex.reply,
// to be written to the client after the slot is given back; a stream is
// relayed as it arrives (see relayEvents), and forward returns when the
// upstream has finished sending it. On the windowed path a retryable
// failure is tried again in place (see again).
func (ex *exchange) forward(ctx context.Context, m *dispatch.Member) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ex.cancelCall = cancel
	if m != nil {
		ex.tenant = m.Tenant()
		ex.rec.wave, ex.rec.queueWait = m.WaveID(), m.QueueWait()
		ex.member, ex.rec.bucketWait = m, m.BucketWait()
		ex.p.metrics.SlotWait.Observe(m.SlotWait().Seconds())
		ex.p.metrics.QueueWait.Observe(m.QueueWait().Seconds())
		ex.observeCache(m.CacheStanding())
		if ex.p.tracer != nil {
			ex.p.traceWaits(ctx, ex.rec, m)
		}
		if m.CacheStanding().Role == dispatch.CacheLeader && !ex.desc.Stream {
			// Its followers wait for its first token, not its whole answer.
			if b, err := streamingBody(ex.body.data); err == nil {
				ex.streamed = b
			}
		}
	}
	start := time.Now()
	stream := "false"
	defer func() {
		ex.rec.upstreamTime = since(start)
		ex.p.upstreamDurations.get(stream, func(stream string) prometheus.Observer {
			return ex.p.metrics.UpstreamDuration.WithLabelValues(stream)
		}).Observe(time.Since(start).Seconds())
	}()
	rep, resp, err := ex.fetch(ctx, m)
	switch {
	case err != nil:
		return err
	case resp != nil:
		defer resp.Body.Close()
		// The wave deadline covers a stream up to its headers; from here on
		// the idle timeout governs.
		if m != nil && !m.LiftDeadline() {
			return dispatch.ErrDeadline
		}
		if m != nil {
			m.MarkBegun() // the headers are in: a cache entry exists from here
		}
		stream = "true"
		var firstToken func()
		if m != nil {
			// The gate's adaptive limit learns from the time to first
			// token, which a stream's length does not stretch.
			sent := ex.sent
			firstToken = func() { m.FirstToken(time.Since(sent)) }
		}
		return ex.relayEvents(ctx, cancel, resp, firstToken)
	}
	if m != nil {
		m.MarkBegun()
	}
	ex.reply = rep
	return nil
}

// observeCache notes what CACHE_AWARE made of the request, for its access
// line and the metrics.
func (ex *exchange) observeCache(st dispatch.CacheStanding) {
	if st.Role == dispatch.CacheNone {
		return
	}
	ex.rec.cache = st
	ex.p.metrics.CacheRequests.WithLabelValues(st.Role.String()).Inc()
	if st.Released != "" {
		ex.p.metrics.CacheHold.WithLabelValues(st.Released).Observe(st.Held.Seconds())
	}
}

// fetch makes the request's upstream attempts until one gives an answer
// to relay: a whole reply, or a stream's response with its body still to
// be read. The decision to try again is made in one place, again, for
// every kind of failure.
func (ex *exchange) fetch(ctx context.Context, m *dispatch.Member) (*reply, *http.Response, error) {
	for attempt := 1; ; attempt++ {
		rep, resp, cause, err := ex.attempt(ctx, m)
		if cause == "" {
			return rep, resp, err
		}
		var h http.Header
		if rep != nil {
			h = rep.header
			ex.last = rep
		}
		retried, werr := ex.again(ctx, m, attempt, cause, h)
		switch {
		case retried:
			continue
		case werr != nil && ex.last != nil && context.Cause(ctx) == dispatch.ErrDeadline:
			// The deadline passed while waiting to try again: the upstream's
			// own last answer, retry-after and all, tells the client more than
			// a timeout would.
			return ex.last, nil, nil
		case werr != nil:
			return nil, nil, werr
		case rep != nil:
			// Giving up: the upstream's own answer, retry-after and all, goes
			// to the client so that its retry policy takes over.
			return rep, nil, nil
		}
		return nil, nil, err
	}
}

// attempt makes one upstream call for m (nil on the plain path, where no
// wave deadline bounds it: UPSTREAM_TIMEOUT_S bounds the wait for its
// headers instead, and STREAM_IDLE_TIMEOUT_S its body). A cause is set
// when the attempt failed in a way worth trying again; rep then holds the
// upstream's answer, if it gave one, and err the failure otherwise.
func (ex *exchange) attempt(ctx context.Context, m *dispatch.Member) (rep *reply, resp *http.Response, cause retry.Cause, err error) {
	p := ex.p
	sent := time.Now()
	ex.sent = sent
	var timeout *time.Timer
	if m == nil {
		// The plain path's one attempt (again never retries it) is cut
		// through forward's own context: a context of its own, as
		// withUpstreamTimeout makes, would be one more per request.
		timeout = time.AfterFunc(p.cfg.UpstreamTimeout, func() { ex.cancelCall(errUpstreamTimeout) })
	}
	body := ex.body.data
	if ex.streamed != nil {
		body = ex.streamed
	}
	in := ex.r
	if p.tracer != nil {
		// The span covers the call up to the answer's end, or for a
		// stream relayed as it comes, up to its headers.
		var span trace.Span
		ctx, span, in = p.startAttemptSpan(ctx, ex.rec, ex.r, ex.retries)
		defer func() {
			status := 0
			switch {
			case rep != nil:
				status = rep.status
			case resp != nil:
				status = resp.StatusCode
			}
			endAttemptSpan(span, status, cause, err != nil)
		}()
	}
	resp, err = p.up.Do(ctx, in, bytes.NewReader(body), int64(len(body)))
	if timeout != nil {
		timeout.Stop() // the headers are in, or the call failed
	}
	if err != nil {
		return nil, nil, retry.CauseConnection, p.upstreamFailure(ctx, err)
	}
	p.metrics.UpstreamTTFB.Observe(time.Since(sent).Seconds())
	ex.rec.upstreamID = resp.Header.Get("Request-Id")
	ex.rec.recordAnswer(resp.Header)
	if m != nil {
		m.Settle(resp.StatusCode, resp.Header) // rate-limit holds learn from every answer
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		p.lastRateLimited.Store(time.Now().UnixNano())
	}
	sse := isEventStream(resp.Header)
	reassembling := ex.streamed != nil && sse && resp.StatusCode == http.StatusOK
	if sse && !reassembling {
		return nil, resp, "", nil
	}
	if reassembling {
		m.MarkBegun() // its first token is in: the followers may go
	}
	data, err := readUpstreamBody(resp, p.cfg.StreamIdleTimeout)
	resp.Body.Close()
	status, header := resp.StatusCode, resp.Header
	if err == nil && reassembling {
		status, data, err = reassemble(data, resp.Header.Get("Request-Id"))
		if err != nil {
			err = fmt.Errorf("reassemble the streamed answer: %w", err)
		}
		header = jsonHeader(resp.Header)
	}
	if err != nil {
		if errors.Is(err, errResponseTooLarge) {
			return nil, nil, "", &apiError{Status: http.StatusBadGateway, Type: "api_error",
				Message: fmt.Sprintf("the upstream's response exceeded %d MB; sluice did not relay it", maxResponseBody>>20)}
		}
		return nil, nil, retry.CauseConnection, p.upstreamFailure(ctx, fmt.Errorf("read response body: %w", err))
	}
	if status == http.StatusOK && !reassembling && !json.Valid(data) {
		// A whole answer cut short or garbled on the way (the connection
		// ended cleanly where it should not have): relayed as a 200, the
		// SDKs fail to decode it and do not retry; a 502 they retry. A
		// reassembled stream is sluice's own JSON, valid by construction.
		p.metrics.InvalidJSON.Inc()
		p.log.Warn("upstream answered 200 with a body that is not valid JSON; answered 502", "upstream_request_id", ex.rec.upstreamID, "bytes", len(data))
		return nil, nil, "", &apiError{Status: http.StatusBadGateway, Type: "api_error",
			Message: fmt.Sprintf("the upstream answered 200 with a body of %d bytes that is not valid JSON; sluice did not relay it. Retry the request", len(data))}
	}
	rep = &reply{status: status, header: header, data: data}
	if c, ok := retry.Retryable(status, header); ok {
		return rep, nil, c, nil
	}
	return rep, nil, "", nil
}

// jsonHeader is the header of a streamed answer made whole: that of a
// JSON answer.
func jsonHeader(h http.Header) http.Header {
	h = h.Clone()
	h.Set("Content-Type", "application/json")
	h.Del("Cache-Control") // the stream's no-cache
	h.Del("Content-Length")
	return h
}

// again decides whether attempt, which failed with cause, is tried again,
// and if so waits its turn: it gives the slot back for the backoff (or the
// wait the upstream asked for in h) and rejoins the gate. It reports false
// to give up: on the plain path, which stays a pass-through; when the
// client left or the deadline passed; after RETRY_MAX_ATTEMPTS; when the
// wait would end past the wave deadline; or when the retry budget is spent.
// err is set when the wait itself was cut short (client gone, deadline).
func (ex *exchange) again(ctx context.Context, m *dispatch.Member, attempt int, cause retry.Cause, h http.Header) (bool, error) {
	if m == nil || ctx.Err() != nil || attempt >= ex.p.cfg.RetryMaxAttempts {
		return false, nil
	}
	wait := retry.Backoff(attempt-1, ex.p.rand())
	if h != nil {
		if d, ok := retry.After(h, time.Now()); ok {
			wait = d
		}
	}
	if time.Now().Add(wait).After(m.Deadline()) {
		return false, nil // no time left for it: let the client's policy decide
	}
	if !ex.p.budget.Spend() {
		ex.p.metrics.RetryBudgetSpent.Inc()
		return false, nil
	}
	ex.retries++
	ex.p.metrics.Retries.WithLabelValues(string(cause)).Inc()
	var span trace.Span
	if ex.p.tracer != nil {
		span = ex.p.startRetryWaitSpan(ctx, ex.rec, cause, wait)
	}
	err := m.Requeue(ctx, wait)
	if span != nil {
		if err != nil {
			span.SetStatus(codes.Error, "the wait was cut short")
		}
		span.End()
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// complete answers the client once the request's passage is over (on the
// windowed path, after its slot was given back): it writes the reply
// forward fetched, waits for a stream's last events to reach the client,
// or answers the failure err; ctx ends when the client left or sluice cut
// the request at shutdown. It gives the body's share of the budget back.
func (ex *exchange) complete(ctx context.Context, err error) {
	defer ex.releaseBody()
	switch {
	case ex.out != nil:
		// A stream: its writer finishes by itself, and a failure after its
		// status was sent has been told in-band.
		ex.out.wait()
	case err == nil && ex.reply != nil:
		ex.writeReply(ex.reply)
	case err == nil:
	case context.Cause(ctx) == errShuttingDown:
		writeError(ex.w, errShutdownCut)
	case ctx.Err() != nil:
		// the client left: nobody to answer
	case errors.Is(err, dispatch.ErrDeadline) && ex.p.buckets != nil && ex.p.buckets.Holds(&ex.desc):
		// Its wait ran out in its key's line: the upstream's rate limit,
		// as sluice models it, could not take it in time.
		retry := max(1, int(math.Ceil(time.Until(ex.p.buckets.HeldUntil(&ex.desc)).Seconds())))
		writeError(ex.w, &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", RetryAfter: retry,
			Message: fmt.Sprintf("this request's API key is at its upstream rate limit and sluice could not fit the request within BATCH_TIMEOUT_S=%s; retry after the retry-after delay, or lower the rate of requests on this key", ex.p.cfg.Timeout)})
	default:
		writeError(ex.w, ex.p.mapError(err))
	}
}

// releaseBody gives the body's share of the budget back, once.
func (ex *exchange) releaseBody() {
	ex.p.bodies.release(ex.body.reserved)
	ex.body.reserved = 0
}

// writeReply writes a whole upstream answer to the client.
func (ex *exchange) writeReply(rep *reply) {
	h := ex.w.Header()
	upstream.CopyHeader(h, rep.header)
	h.Set("Content-Length", strconv.Itoa(len(rep.data)))
	// No slot is held any more, but the handler is: a client that stops
	// reading must not keep it past the idle timeout.
	rc := http.NewResponseController(ex.w)
	_ = rc.SetWriteDeadline(time.Now().Add(ex.p.cfg.StreamIdleTimeout))
	ex.w.WriteHeader(rep.status)
	writeRenewing(ex.w, rc, rep.data, ex.p.cfg.StreamIdleTimeout)
	if rep.status == http.StatusOK {
		// After the write: the client has its answer before sluice spends
		// a decode on the metrics.
		ex.countMessageTokens(rep.data)
	}
}

// describe is what the scheduler's policies know of ex's request: its
// descriptor, whose patience counts only when ADMIT_BY_CLIENT_TIMEOUT is
// on.
func (p *Proxy) describe(ex *exchange) *request.Descriptor {
	if !p.cfg.AdmitByClientTimeout {
		ex.desc.Patience = 0
	}
	return &ex.desc
}

// mapError is the one place where a failure becomes a client-visible error.
func (p *Proxy) mapError(err error) *apiError {
	var ae *apiError
	var ue *upstream.Error
	var pe *dispatch.PanicError
	var tooLong *dispatch.WaitTooLongError
	var full *dispatch.TenantFullError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &full):
		return tenantFull(full)
	case errors.Is(err, dispatch.ErrDeadline) && p.rateLimitedWithin(p.cfg.Timeout):
		// The wait that ran out was the upstream's: it is refusing calls
		// for its rate limit, and every slot went to retries and holds.
		// Say so, as the upstream would, with when to retry.
		return &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", RetryAfter: max(1, int(math.Ceil(time.Until(p.pacer.Until()).Seconds()))),
			Message: fmt.Sprintf("the upstream is rate limiting this organization and sluice could not get this request through within BATCH_TIMEOUT_S=%s; retry after the retry-after delay", p.cfg.Timeout)}
	case errors.Is(err, errUpstreamTimeout):
		return &apiError{Status: http.StatusGatewayTimeout, Type: "timeout_error",
			Message: fmt.Sprintf("the upstream sent no response within UPSTREAM_TIMEOUT_S=%s; retry later", p.cfg.UpstreamTimeout)}
	case errors.Is(err, dispatch.ErrDeadline):
		return &apiError{Status: http.StatusGatewayTimeout, Type: "timeout_error",
			Message: fmt.Sprintf("sluice gave up after BATCH_TIMEOUT_S=%s, counted from the request's window flush, waiting for a concurrency slot and the upstream's response; retry later, or raise BATCH_TIMEOUT_S or BATCH_MAX_CONCURRENCY", p.cfg.Timeout)}
	case errors.Is(err, dispatch.ErrQueueFull):
		return &apiError{Status: 529, Type: "overloaded_error", RetryAfter: 1,
			Message: fmt.Sprintf("sluice is overloaded: BATCH_MAX_QUEUE=%d requests are already waiting for the upstream; retry after the retry-after delay", p.cfg.MaxQueue)}
	case errors.As(err, &tooLong):
		return &apiError{Status: 529, Type: "overloaded_error", RetryAfter: max(1, int(math.Ceil(tooLong.Expected.Seconds()))),
			Message: fmt.Sprintf("sluice is overloaded: this request would wait about %s for one of the BATCH_MAX_CONCURRENCY=%d slots, more than the client's own %s timeout (x-stainless-timeout) leaves for the call; retry after the retry-after delay",
				tooLong.Expected.Round(time.Millisecond), p.cfg.MaxConcurrency, tooLong.Patience)}
	case errors.Is(err, dispatch.ErrClosed):
		return &apiError{Status: 529, Type: "overloaded_error", RetryAfter: 1,
			Message: "sluice is shutting down and accepts no new requests; retry in a moment"}
	case errors.As(err, &ue):
		// The upstream's address and the dial error are for the operator's
		// log, not for clients: they may name a private host.
		p.log.Warn("upstream call failed", "upstream", p.upstreamName(), "dial", ue.Dial, "err", ue.Err)
		if ue.Dial {
			return &apiError{Status: http.StatusBadGateway, Type: "api_error",
				Message: "sluice could not connect to its upstream; the request was not sent. Retry later; if it persists, the operator should check UPSTREAM_URL and that the upstream is reachable"}
		}
		return &apiError{Status: http.StatusBadGateway, Type: "api_error",
			Message: "the connection to sluice's upstream failed before a complete response; the request may have reached it. Retry if it is safe to"}
	case errors.As(err, &pe):
		p.log.Error("request handler panicked", "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		return &apiError{Status: http.StatusInternalServerError, Type: "api_error",
			Message: "sluice hit an internal error handling this request; retry, and report it if it persists"}
	}
	p.log.Error("unexpected failure", "err", err)
	// Not the error's text: it may carry an internal address.
	return &apiError{Status: http.StatusBadGateway, Type: "api_error",
		Message: "sluice could not complete the request; retry, and report it with the request id if it persists"}
}

// rateLimitedWithin reports whether the upstream held calls back for its
// rate limit in the last d: it answered 429, or its headers said a limit
// was exhausted.
func (p *Proxy) rateLimitedWithin(d time.Duration) bool {
	now := time.Now()
	return p.pacer.Until().After(now.Add(-d)) || now.UnixNano()-p.lastRateLimited.Load() < int64(d)
}

// upstreamFailure is the error for an upstream call that failed with err
// under ctx: a timeout of sluice's own (UPSTREAM_TIMEOUT_S) is said as
// such; anything else is the upstream's failure.
func (p *Proxy) upstreamFailure(ctx context.Context, err error) error {
	if context.Cause(ctx) == errUpstreamTimeout {
		return errUpstreamTimeout
	}
	var ue *upstream.Error
	if errors.As(err, &ue) {
		return err
	}
	return &upstream.Error{Upstream: p.upstreamName(), Err: err}
}

func (p *Proxy) upstreamName() string {
	b := p.up.Base()
	return b.Scheme + "://" + b.Host
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	// Most answers are JSON: only a value that names event-stream is
	// worth mime's parse, which allocates a map for the parameters. The
	// media type is a token (ASCII) and is not decoded, so a value that
	// lacks the word, in any case, never parses to text/event-stream.
	if !containsFoldASCII(ct, "event-stream") {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && strings.EqualFold(mt, "text/event-stream")
}

// containsFoldASCII reports whether s holds sub (lower-case ASCII) in any
// ASCII case.
func containsFoldASCII(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for ; j < len(sub); j++ {
			c := s[i+j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != sub[j] {
				break
			}
		}
		if j == len(sub) {
			return true
		}
	}
	return false
}
