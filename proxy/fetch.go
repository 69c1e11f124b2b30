package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/retry"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/sse"
	"github.com/sluicehq/sluice/upstream"
)

// Stage 5 of a Messages request (see messages.go): fetching its answer
// from the upstream while it holds its slot, with the one decision to try
// again.

// forwardMember is stage 5 on the windowed path, the scheduler's
// function: forward, while m holds its slot.
func (ex *exchange) forwardMember(ctx context.Context, m *dispatch.Member) error {
	return ex.forward(ctx, memberTurn{m})
}

// forward fetches the answer to the request from the upstream under ctx,
// in its turn t (turn.go: on the windowed path while it holds its slot).
// A whole answer is left in ex.reply, to be written to the client after
// the turn is given back; a stream is relayed as it arrives (see
// relayEvents), and forward returns when the upstream has finished
// sending it. A failure another attempt may mend is tried again in place
// (see again).
func (ex *exchange) forward(ctx context.Context, t turn) error {
	parent := ctx
	ctx, ex.cancelCall = context.WithCancelCause(ctx)
	defer func() { ex.cancelCall(nil) }() // the latest call's: see fetch
	ex.turn = t
	t.open(ctx, ex)
	start := time.Now()
	stream := "false"
	defer func() {
		ex.rec.upstreamTime = since(start)
		ex.p.upstreamDurations.get(stream, func(stream string) prometheus.Observer {
			return ex.p.metrics.UpstreamDuration.WithLabelValues(stream)
		}).Observe(time.Since(start).Seconds())
	}()
	rep, resp, ctx, err := ex.fetch(parent, ctx, t)
	switch {
	case err != nil:
		return err
	case resp != nil:
		defer resp.Body.Close()
		// The wave deadline covers a stream up to its headers; from here on
		// the idle timeout governs.
		if !t.LiftDeadline() {
			return dispatch.ErrDeadline
		}
		t.MarkBegun() // the headers are in: a cache entry exists from here
		stream = "true"
		ex.letGoOfBody()
		return ex.relayEvents(ctx, ex.cancelCall, resp, t)
	}
	t.MarkBegun()
	if ex.p.budgets != nil && rep.status == http.StatusOK {
		// Counted before the turn is given back, not after the write:
		// the budget's check of the next request (dispatch.Budget, at its
		// admission and its release) must see this answer's spend, or a
		// client slow to take its answer would let others past a crossed
		// budget.
		ex.countMessageTokens(rep.data)
		rep.counted = true
	}
	ex.reply = rep
	return nil
}

// observeCache notes what CACHE_AWARE made of the request, for its access
// line and the metrics.
func (ex *exchange) observeCache(st cacheaware.Standing) {
	if st.Role == cacheaware.CacheNone {
		return
	}
	ex.rec.cache = st
	ex.p.metrics.CacheRequests.WithLabelValues(st.Role.String()).Inc()
	if st.Released != "" {
		ex.p.metrics.CacheHold.WithLabelValues(st.Released).Observe(st.Held.Seconds())
	}
}

// fetch makes the request's upstream attempts in its turn t under ctx,
// forward's call context of parent, until one gives an answer to relay: a
// whole reply, or a stream's response with its body still to be read. The
// decision to try again is made in one place, again, for every kind of
// failure. It returns the call context the answer came under: an attempt
// whose headers were late was cut through ctx, and the next one is made
// under a new one (ex.cancelCall cancels it).
func (ex *exchange) fetch(parent, ctx context.Context, t turn) (*reply, *http.Response, context.Context, error) {
	for attempt := 1; ; attempt++ {
		rep, resp, cause, err := ex.attempt(ctx, t)
		if cause == "" {
			return rep, resp, ctx, err
		}
		if cause == causeHeadersLate && parent.Err() == nil {
			// Cut by its key's bound, not by its client or deadline: the
			// next key gets a call context of its own. Rare: a key found
			// silent, so it costs the common path nothing.
			ctx, ex.cancelCall = context.WithCancelCause(parent)
		}
		var h http.Header
		if rep != nil {
			h = rep.header
			ex.last = rep
		}
		retried, werr := ex.again(ctx, t, attempt, cause, h, err)
		switch {
		case retried:
			continue
		case werr != nil && ex.last != nil && context.Cause(ctx) == dispatch.ErrDeadline:
			// The deadline passed while waiting to try again: the upstream's
			// own last answer, retry-after and all, tells the client more than
			// a timeout would.
			return ex.last, nil, ctx, nil
		case werr != nil:
			return nil, nil, ctx, werr
		case rep != nil:
			// Giving up: the upstream's own answer, retry-after and all, goes
			// to the client so that its retry policy takes over.
			return rep, nil, ctx, nil
		}
		return nil, nil, ctx, err
	}
}

// attempt makes one upstream call in t: it sends it (send) and judges
// the answer (judge). A cause is set when the attempt failed in a way
// worth trying again; rep then holds the upstream's answer, if it gave
// one, and err the failure otherwise. An answer that had begun (a success
// status in) is never tried again, on either path.
func (ex *exchange) attempt(ctx context.Context, t turn) (rep *reply, resp *http.Response, cause retry.Cause, err error) {
	in := ex.r
	if ex.p.tracer != nil {
		// The span covers the call up to the answer's end, or for a
		// stream relayed as it comes, up to its headers.
		var span trace.Span
		ctx, span, in = ex.p.startAttemptSpan(ctx, ex.rec, ex.r, ex.retries)
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
	resp, key, cause, err := ex.send(ctx, t, in)
	if resp == nil {
		return nil, nil, cause, err
	}
	return ex.judge(ctx, t, resp, key)
}

// send sends one upstream call of in, the request, in t, and waits for
// its headers. On both paths the wait is bounded (see watchHeaders): by
// UPSTREAM_TIMEOUT_S, and with backends by the bound its key's answers
// teach; on the windowed path the wave deadline may come first. Its key
// (nil without backends) is told how the call went. resp is nil when the
// call failed: cause then says whether it is worth trying again.
func (ex *exchange) send(ctx context.Context, t turn, in *http.Request) (resp *http.Response, key *route.Key, cause retry.Cause, err error) {
	p := ex.p
	sent := time.Now()
	ex.sent = sent
	body := ex.body.data
	if ex.streamed != nil {
		body = ex.streamed
	}
	client, key := ex.backendFor(t)
	if client == nil {
		return nil, nil, "", errNoBackend(ex.desc.Inbound)
	}
	limits := headerLimits{upstreamTimeout: p.cfg.UpstreamTimeout}
	if key != nil {
		key.Authorize(in.Header)
		// The body sent asks for a stream (a cache leader's does): its
		// headers come before its first token, a whole answer's after its
		// last.
		limits.pool, limits.key, limits.stream = p.routes, key, ex.desc.Stream || ex.streamed != nil
		limits.size = ex.desc.Cost.InputTokens
		if !limits.stream {
			limits.size += ex.desc.Cost.MaxTokens
		}
	}
	var watch *headerWatch
	if dl := t.Deadline(); dl.IsZero() || sent.Add(limits.first()).Before(dl) {
		// Cut through forward's own context: a context of its own per
		// attempt, as withUpstreamTimeout makes, would be one more per
		// request. A watch the wave deadline comes before is not armed.
		watch = watchHeaders(&ex.watch, limits, sent, ex.cancelCall)
	}
	// A stream's body is let go of once its events are being relayed
	// (letGoOfBody), through a Body the transport holds none of after;
	// a whole answer's is held only until the answer is read, and a
	// bytes.Reader costs it three allocations less.
	var reader io.Reader
	if ex.desc.Stream {
		ex.sending = upstream.NewBody(body)
		reader = ex.sending
	} else {
		reader = bytes.NewReader(body)
	}
	resp, err = client.Do(ctx, in, reader, int64(len(body)))
	late, bound := watch.stop() // the headers are in, or the call failed
	if late && err == nil {
		// The headers came as the watch cut the call: too late.
		resp.Body.Close()
		resp, err = nil, context.Cause(ctx)
	}
	ttfb := time.Since(sent)
	if key != nil {
		status := 0
		if err == nil {
			status = resp.StatusCode
		}
		switch {
		case late:
			// No headers within the bound: the key failed the call, as a
			// 529 would have, and is skipped for a while.
			p.routes.Result(key, route.Overloaded, time.Now())
		case ctx.Err() == nil:
			p.routes.Answered(key, status, time.Now())
			if status >= 200 && status < 300 {
				p.routes.FirstByte(key, limits.stream, limits.size, ttfb)
			}
		} // otherwise cut by its client or the wave deadline: says nothing of the key
	}
	if late && context.Cause(ctx) == errHeadersLate {
		return nil, key, causeHeadersLate, errKeyNoHeaders(key, bound)
	}
	if err != nil {
		return nil, key, retry.CauseConnection, p.upstreamFailure(ctx, err)
	}
	p.metrics.UpstreamTTFB.Observe(ttfb.Seconds())
	return resp, key, "", nil
}

// judge reads the answer resp to a call of t made with key (nil without
// backends): what the turn's policies learn from it, and whether it is
// relayed (a stream, with its body still to be read), read whole, or
// worth trying again (cause). STREAM_IDLE_TIMEOUT_S bounds the read of
// its body.
func (ex *exchange) judge(ctx context.Context, t turn, resp *http.Response, key *route.Key) (rep *reply, _ *http.Response, cause retry.Cause, err error) {
	p := ex.p
	ex.rec.upstreamID = resp.Header.Get("Request-Id")
	ex.rec.recordAnswer(resp.Header)
	t.Settle(resp.StatusCode, resp.Header) // rate-limit holds learn from every answer
	if resp.StatusCode == http.StatusTooManyRequests {
		// Remembered in every pacing mode, for the 429 sluice answers a
		// request whose wait then runs out (see rateLimited).
		p.lastRateLimited.Store(time.Now().UnixNano())
		p.pacer.Observe(resp.StatusCode, resp.Header)
	}
	isSSE := isEventStream(resp.Header)
	reassembling := ex.streamed != nil && isSSE && resp.StatusCode == http.StatusOK
	if isSSE && !reassembling {
		return nil, resp, "", nil
	}
	if reassembling {
		t.MarkBegun() // its first token is in: the followers may go
	}
	data, err := readUpstreamBody(resp, p.cfg.StreamIdleTimeout)
	resp.Body.Close()
	status, header := resp.StatusCode, resp.Header
	if err == nil && reassembling {
		status, data, err = sse.Reassemble(data, resp.Header.Get("Request-Id"))
		if err != nil {
			err = fmt.Errorf("reassemble the streamed answer: %w", err)
		}
		header = jsonHeader(resp.Header)
	}
	if err != nil {
		if errors.Is(err, errResponseTooLarge) {
			return nil, nil, "", errAnswerTooLarge
		}
		err = p.upstreamFailure(ctx, fmt.Errorf("read response body: %w", err))
		if ctx.Err() == nil && status < 300 {
			// The answer had begun: the upstream generated it and bills
			// it. Sent again it would be generated twice and counted once.
			p.log.Warn("upstream answer broke off after it had begun; not sent again", "upstream_request_id", ex.rec.upstreamID, "status", status, "err", err)
			return nil, nil, "", errAnswerBroke(status)
		}
		return nil, nil, retry.CauseConnection, err
	}
	if status == http.StatusOK && !reassembling && !json.Valid(data) {
		// A whole answer cut short or garbled on the way (the connection
		// ended cleanly where it should not have): relayed as a 200, the
		// SDKs fail to decode it and do not retry; a 502 they retry. A
		// reassembled stream is sluice's own JSON, valid by construction.
		p.metrics.InvalidJSON.Inc()
		p.log.Warn("upstream answered 200 with a body that is not valid JSON; answered 502", "upstream_request_id", ex.rec.upstreamID, "bytes", len(data))
		return nil, nil, "", errAnswerNotJSON(len(data))
	}
	rep = &reply{status: status, header: header, data: data}
	if c, ok := retry.Retryable(status, header); ok {
		return rep, nil, c, nil
	}
	if key != nil && status == http.StatusUnauthorized {
		// The upstream refused the key sluice holds, not the client's:
		// another key may take the request (see again).
		return rep, nil, causeKeyRefused, nil
	}
	return rep, nil, "", nil
}

// causeKeyRefused is a 401 to a call made with a backend key sluice
// holds: tried again only on another key.
const causeKeyRefused retry.Cause = "401"

// notSent reports whether err, a failed upstream call, failed to connect:
// nothing of the request was sent.
func notSent(err error) bool {
	var ue *upstream.Error
	return errors.As(err, &ue) && ue.Dial
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

// again decides whether an attempt in t, which failed with cause (the
// upstream's answer's header h, or the failure err), is tried again, and
// if so waits its turn: it gives t's hold back for the backoff (or the
// wait the upstream asked for in h) and takes it again. With backends, a
// failure on one key goes to another at once, if another may take it
// (its own key is skipped or held now): on the plain path too, since
// nothing has reached the client yet, but only that (see turn.waits). It
// reports false to give up: when the client left or the deadline passed;
// after RETRY_MAX_ATTEMPTS; when the wait would end past the deadline; or
// when the retry budget is spent. The error is set when the wait itself
// was cut short (client gone, deadline).
func (ex *exchange) again(ctx context.Context, t turn, attempt int, cause retry.Cause, h http.Header, err error) (bool, error) {
	if ctx.Err() != nil || attempt >= ex.p.cfg.RetryMaxAttempts {
		return false, nil
	}
	failover := ex.failoverNow()
	switch {
	case failover && !t.waits() && cause == retry.CauseConnection && !notSent(err):
		// A pass-through fails over only what never reached the upstream:
		// a call cut after it was sent may be running there, and the
		// client is told so (it may retry, if that is safe).
		return false, nil
	case failover:
	case !t.waits(), cause == causeKeyRefused, cause == causeHeadersLate:
		// A refused key refuses again; a key whose headers were late may
		// be slow rather than silent, and running the request still.
		return false, nil
	}
	var wait time.Duration // a failover's is none: the backoff and the retry-after are the failed key's
	if !failover {
		wait = retry.Backoff(attempt-1, ex.p.rand())
		if h != nil {
			if d, ok := retry.After(h, time.Now()); ok {
				wait = d
			}
		}
	}
	if dl := t.Deadline(); !dl.IsZero() && time.Now().Add(wait).After(dl) {
		return false, nil // no time left for it: let the client's policy decide
	}
	if !ex.p.budget.Spend() {
		ex.p.metrics.RetryBudgetSpent.Inc()
		return false, nil
	}
	ex.retries++
	ex.p.metrics.Retries.WithLabelValues(string(cause)).Inc()
	if err := t.requeue(ctx, ex, cause, wait); err != nil {
		return false, err
	}
	return true, nil
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
