package proxy

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/retry"
)

// Tracing (see docs/tracing.md). Every function here is called only when
// p.tracer is set: with tracing off the request path does no tracing work
// at all, not even a no-op tracer's calls.
//
// No span carries a header, a key, a token or a body: only the request's
// shape (method, route, model, stream) and what sluice did with it.

// instrumentationName names sluice's tracer, as OpenTelemetry asks: the
// package that makes the spans.
const instrumentationName = "github.com/sluicehq/sluice/proxy"

// traceContext is W3C Trace Context, the one propagation sluice speaks,
// both ways: taken from the client's traceparent, given to the upstream.
var traceContext = propagation.TraceContext{}

// startServerSpan starts rec's server span, a child of the client's
// traceparent when it sent one, and returns r with it in its context.
// Probes and scrapes get none: like the access log, traces would drown in
// them.
func (p *Proxy) startServerSpan(r *http.Request, rec *record) *http.Request {
	route := routeOf(r)
	if route == "healthz" || route == "readyz" || route == "metrics" {
		return r
	}
	name := r.Method + " " + route
	if route == "messages" {
		name = r.Method + " /v1/messages"
	}
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, rec.span = p.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(rec.start),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("sluice.route", route),
			attribute.String("sluice.request_id", rec.id)))
	return r.WithContext(ctx)
}

// endServerSpan ends rec's span with what the request came to; status is
// as the access line gives it (499: the client left first).
func endServerSpan(rec *record, status int, mode string, end time.Time) {
	span := rec.span
	span.SetAttributes(attribute.Int("http.response.status_code", status), attribute.String("sluice.mode", mode))
	if rec.model != "" {
		span.SetAttributes(attribute.String("gen_ai.request.model", rec.model), attribute.Bool("sluice.stream", rec.stream))
	}
	if rec.windowed && rec.wave != 0 {
		span.SetAttributes(attribute.Int64("sluice.wave_id", int64(rec.wave)), attribute.Int("sluice.retries", rec.retries),
			attribute.Float64("sluice.queue_wait_ms", millis(rec.queueWait)))
	}
	if rec.cache.Role != cacheaware.CacheNone {
		span.SetAttributes(attribute.String("sluice.cache", rec.cache.Role.String()))
	}
	if rec.upstreamID != "" {
		span.SetAttributes(attribute.String("sluice.upstream_request_id", rec.upstreamID))
	}
	if status >= 500 {
		// A server span's error is sluice's answer failing; a 4xx is the
		// client's, as OpenTelemetry's HTTP conventions have it.
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End(trace.WithTimestamp(end))
}

// parentContext is ctx with rec's server span as the parent of the spans
// started under it: set explicitly, since a parked request's context is
// not its handler's.
func parentContext(ctx context.Context, rec *record) context.Context {
	if rec.span == nil {
		return ctx // a handler called without ServeHTTP (unit tests)
	}
	return trace.ContextWithSpan(ctx, rec.span)
}

// traceWaits records the windowed request's waits, now over, as children
// of its server span: in its window until the wave closed, then for a
// slot until it got one. The member knows them only afterwards, so the
// spans are made with their times, at the grant.
func (p *Proxy) traceWaits(ctx context.Context, rec *record, m *dispatch.Member) {
	granted := m.Granted()
	closed, joined := granted.Add(-m.SlotWait()), granted.Add(-m.QueueWait())
	ctx = parentContext(ctx, rec)
	wave := attribute.Int64("sluice.wave_id", int64(m.WaveID()))
	_, w := p.tracer.Start(ctx, "window wait", trace.WithTimestamp(joined),
		trace.WithAttributes(wave, attribute.String("sluice.flush_reason", m.FlushReason().String())))
	w.End(trace.WithTimestamp(closed))
	_, s := p.tracer.Start(ctx, "slot wait", trace.WithTimestamp(closed), trace.WithAttributes(wave))
	s.End(trace.WithTimestamp(granted))
}

// startAttemptSpan starts the client span of one upstream call of rec's
// request r, retry being the number of tries before it, and returns the
// request to send: r with its traceparent (and tracestate) replaced by the
// span's, on a copy of its header, for r's own is the client's and is
// sent again on a retry.
func (p *Proxy) startAttemptSpan(ctx context.Context, rec *record, r *http.Request, retry int) (context.Context, trace.Span, *http.Request) {
	ctx, span := p.tracer.Start(parentContext(ctx, rec), "upstream "+r.Method, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("server.address", p.up.Base().Hostname()),
			attribute.Int("sluice.attempt", retry+1), attribute.Int("http.request.resend_count", retry)))
	out := r.WithContext(r.Context())
	out.Header = r.Header.Clone()
	traceContext.Inject(ctx, propagation.HeaderCarrier(out.Header))
	return ctx, span, out
}

// endAttemptSpan ends an upstream call's span: status is the upstream's
// (0: none came), cause why it is worth another try, if it is. The error's
// text is left out: it may name an address the operator keeps private.
func endAttemptSpan(span trace.Span, status int, cause retry.Cause, failed bool) {
	if status != 0 {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
	if cause != "" {
		span.SetAttributes(attribute.String("sluice.retry_cause", string(cause)))
	}
	if failed || status >= 400 {
		span.SetStatus(codes.Error, "")
	}
	span.End()
}

// startRetryWaitSpan starts the span of a retry's wait: its backoff, then
// its new wait for a slot.
func (p *Proxy) startRetryWaitSpan(ctx context.Context, rec *record, cause retry.Cause, backoff time.Duration) trace.Span {
	_, span := p.tracer.Start(parentContext(ctx, rec), "retry wait",
		trace.WithAttributes(attribute.String("sluice.retry_cause", string(cause)), attribute.Float64("sluice.backoff_ms", millis(backoff))))
	return span
}

// endRetryWaitSpan ends a retry wait's span; err says the wait was cut
// short (client gone, deadline).
func endRetryWaitSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "the wait was cut short")
	}
	span.End()
}
