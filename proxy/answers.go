package proxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/upstream"
)

// The answers to a Messages request that failed: every error the request
// path answers of its own is built in this file.

// failure is the answer to a Messages request whose passage failed with
// err; desc is what is known of the request (nil before it was read), and
// sent whether it was sent upstream.
func (p *Proxy) failure(desc *request.Descriptor, err error, sent bool) *apierror.Error {
	if errors.Is(err, dispatch.ErrDeadline) {
		if e := p.rateLimited(desc); e != nil {
			return e
		}
		if sent {
			// Cut while the upstream had it: the upstream's slowness, not
			// sluice's back-pressure (mapError's answer for a request
			// that never left its line).
			return &apierror.Error{Status: http.StatusGatewayTimeout, Type: "timeout_error",
				Message: fmt.Sprintf("sluice gave up after BATCH_TIMEOUT_S=%s, counted from the request's window flush, waiting for the upstream's response; retry later, or raise BATCH_TIMEOUT_S", p.cfg.Timeout)}
		}
	}
	return p.mapError(err)
}

// rateLimited is the 429 for a request whose wait ran out while the
// upstream's rate limit held calls back, or nil if it did not. It says
// when the request would fit: its key's refill, as RATE_LIMIT_PACING=
// buckets models it, when the request waited in its key's line; else the
// latest wait the upstream asked for (a 429's retry-after, or under
// RATE_LIMIT_PACING=reset an exhausted limit's reset). Every 429 sluice
// makes of its own is built here.
func (p *Proxy) rateLimited(desc *request.Descriptor) *apierror.Error {
	now := time.Now()
	if desc != nil && p.buckets != nil && p.buckets.Holds(desc) {
		// Its wait ran out in its key's line: the upstream's rate limit,
		// as sluice models it, could not take it in time.
		return &apierror.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", RetryAfter: secondsUntil(p.buckets.HeldUntil(desc), now),
			Message: fmt.Sprintf("this request's API key is at its upstream rate limit and sluice could not fit the request within BATCH_TIMEOUT_S=%s; retry after the retry-after delay, or lower the rate of requests on this key", p.cfg.Timeout)}
	}
	if !p.rateLimitedWithin(p.cfg.Timeout) {
		return nil
	}
	// The wait that ran out was the upstream's: it is refusing calls for
	// its rate limit, and every slot went to retries and holds. Say so, as
	// the upstream would, with when to retry.
	until := p.pacer.Until()
	if desc != nil && p.buckets != nil {
		if t := p.buckets.HeldUntil(desc); t.After(until) {
			until = t
		}
	}
	return &apierror.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", RetryAfter: secondsUntil(until, now),
		Message: fmt.Sprintf("the upstream is rate limiting this organization and sluice could not get this request through within BATCH_TIMEOUT_S=%s; retry after the retry-after delay", p.cfg.Timeout)}
}

// errAnswerTooLarge answers a request whose whole answer from the
// upstream was past maxResponseBody.
var errAnswerTooLarge = &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
	Message: fmt.Sprintf("the upstream's response exceeded %d MB; sluice did not relay it", maxResponseBody>>20)}

// errAnswerNotJSON answers a request whose upstream answered 200 with n
// bytes that are not JSON: relayed as a 200, the SDKs would fail to
// decode it and not retry; a 502 they retry.
func errAnswerNotJSON(n int) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
		Message: fmt.Sprintf("the upstream answered 200 with a body of %d bytes that is not valid JSON; sluice did not relay it. Retry the request", n)}
}

// errInternal answers a request whose handling panicked.
var errInternal = &apierror.Error{Status: http.StatusInternalServerError, Type: "api_error",
	Message: "sluice hit an internal error handling this request; retry, and report it if it persists"}

// backPressure is sluice's answer to a request it holds back of its own,
// with no fault of the request's or the upstream's: its queue is full, the
// tenant's or key's waiting bound is reached, the request would outwait its
// client, the wave deadline passed before it left its line, the bodies
// held would pass BODY_BUDGET_MB, MAX_PENDING_CONNS is reached, sluice is
// shutting down. Every such answer is built here (refuseConn writes its
// shape by hand), and is a 429 rate_limit_error with a retry-after of
// wait, in whole seconds within [1, maxRetryAfter].
//
// Not a 529 overloaded_error, nor any 5xx: Claude Code counts every 529
// (and every error whose body says overloaded_error, whatever its status)
// towards switching to its fallback model, and switches after three in a
// row; any other 5xx makes it switch at once. That sheds nothing here
// (the same queue serves both models) and changes what the user gets and
// pays for. A 429 it retries on the same model, waiting at least the
// retry-after (up to 10 retries, backing off to 32 s); the official SDKs
// retry a 429 as they do a 529, after the retry-after (docs/errors.md has
// what each client was measured to do).
func backPressure(wait time.Duration, message string) *apierror.Error {
	return &apierror.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", RetryAfter: retryAfterFor(wait), Message: message}
}

// maxRetryAfter bounds a back-pressure answer's retry-after: Claude Code
// gives up at once on a retry-after over 60 s rather than wait it.
const maxRetryAfter = 60

// retryAfterFor is wait as a retry-after: whole seconds, rounded up, at
// least 1 (never a retry at once, in a tight loop) and at most
// maxRetryAfter.
func retryAfterFor(wait time.Duration) int {
	return min(maxRetryAfter, max(1, int(math.Ceil(wait.Seconds()))))
}

// drainWait is how long the requests waiting now would take to reach the
// upstream, as the scheduler estimates it from its slots and their recent
// service time: when a request shed now would find room. Zero when
// windowing is off or nothing has been served yet.
func (p *Proxy) drainWait() time.Duration {
	if p.sched == nil {
		return 0
	}
	return p.sched.ExpectedWait()
}

// secondsUntil is a retry-after for t: whole seconds from now, at least 1.
func secondsUntil(t, now time.Time) int { return max(1, int(math.Ceil(t.Sub(now).Seconds()))) }

// mapError is the answer for a failure that is not the request's own:
// sluice's refusals, the upstream's failures, and internal errors.
func (p *Proxy) mapError(err error) *apierror.Error {
	var ae *apierror.Error
	var ue *upstream.Error
	var pe *dispatch.PanicError
	var tooLong *dispatch.WaitTooLongError
	var full *dispatch.TenantFullError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &full):
		return p.tenantFull(full)
	case errors.Is(err, errUpstreamTimeout):
		return &apierror.Error{Status: http.StatusGatewayTimeout, Type: "timeout_error",
			Message: fmt.Sprintf("the upstream sent no response within UPSTREAM_TIMEOUT_S=%s; retry later", p.cfg.UpstreamTimeout)}
	case errors.Is(err, dispatch.ErrDeadline):
		// The deadline passed before the request left its line:
		// back-pressure too, not a 504, which Claude Code answers by
		// switching to its fallback model at once, as it does any 5xx
		// but 529.
		return backPressure(p.drainWait(),
			fmt.Sprintf("sluice gave up after BATCH_TIMEOUT_S=%s, counted from the request's window flush, waiting for one of the BATCH_MAX_CONCURRENCY=%d slots; the request was not sent. Retry after the retry-after delay; if it lasts, send fewer requests at once, or whoever runs sluice raises BATCH_TIMEOUT_S or BATCH_MAX_CONCURRENCY", p.cfg.Timeout, p.cfg.MaxConcurrency))
	case errors.Is(err, dispatch.ErrQueueFull):
		return backPressure(p.drainWait(),
			fmt.Sprintf("sluice is holding back this request: BATCH_MAX_QUEUE=%d requests are already waiting for the upstream. Retry after the retry-after delay, when about that many will have been served; if it lasts, send fewer requests at once", p.cfg.MaxQueue))
	case errors.As(err, &tooLong):
		return backPressure(tooLong.Expected,
			fmt.Sprintf("sluice is holding back this request: it would wait about %s for one of the BATCH_MAX_CONCURRENCY=%d slots, more than the client's own %s timeout (x-stainless-timeout) leaves for the call. Retry after the retry-after delay",
				tooLong.Expected.Round(time.Millisecond), p.cfg.MaxConcurrency, tooLong.Patience))
	case errors.Is(err, dispatch.ErrClosed):
		return backPressure(time.Second, "sluice is shutting down and accepts no new requests; retry after the retry-after delay (another instance, or this one once restarted, will serve it)")
	case errors.As(err, &ue):
		// The upstream's address and the dial error are for the operator's
		// log, not for clients: they may name a private host.
		p.log.Warn("upstream call failed", "upstream", ue.Upstream, "dial", ue.Dial, "credentials", ue.Credentials, "err", ue.Err)
		if ue.Credentials {
			return &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
				Message: "sluice could not get the credentials of its cloud backend (Vertex: the service account, credentials_file or Application Default Credentials; Bedrock: the AWS credentials or profile); the request was not sent. Retry later; if it persists, the operator should check those credentials (sluice's log names the backend and the error)"}
		}
		if ue.Dial && p.routes != nil {
			return &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
				Message: "sluice could not connect to its upstream; the request was not sent. Retry later; if it persists, the operator should check the url or endpoint of the backends in sluice's [[backends]] and that they are reachable"}
		}
		if ue.Dial {
			return &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
				Message: "sluice could not connect to its upstream; the request was not sent. Retry later; if it persists, the operator should check UPSTREAM_URL and that the upstream is reachable"}
		}
		return &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
			Message: "the connection to sluice's upstream failed before a complete response; the request may have reached it. Retry if it is safe to"}
	case errors.As(err, &pe):
		p.logPanic(pe)
		return errInternal
	}
	p.log.Error("unexpected failure", "err", err)
	// Not the error's text: it may carry an internal address.
	return &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
		Message: "sluice could not complete the request; retry, and report it with the request id if it persists"}
}

// logPanic logs err if it is a request's contained panic (a
// *dispatch.PanicError): apart from mapError for a stream, whose client
// was told in-band and gets no error answer. Apart from answer: errors.As's
// target escapes, and declared there it would cost every request.
func (p *Proxy) logPanic(err error) {
	var pe *dispatch.PanicError
	if errors.As(err, &pe) {
		p.log.Error("request handler panicked", "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
	}
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

// upstreamName is the upstream ex was sent to, for the log: its key's
// backend and place when routed (a cloud's too), else UPSTREAM_URL's.
func (ex *exchange) upstreamName() string {
	if ex.key != nil {
		return "backend " + ex.key.Name
	}
	return ex.p.upstreamName()
}

func (p *Proxy) upstreamName() string {
	b := p.up.Base()
	return b.Scheme + "://" + b.Host
}
