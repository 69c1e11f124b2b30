package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/retry"
	"github.com/sluicehq/sluice/route"
)

// The wait for an upstream answer's headers, on both paths: bounded by
// UPSTREAM_TIMEOUT_S, and with backends by what each key's own answers
// teach (route.Pool.FirstByteBound), so that a key that accepts calls and
// never answers is counted failing and left for another key within a
// request's deadline. Once the headers are in, nothing here cuts: a long
// stream is the idle timeout's business.

// headerLimits is what bounds one attempt's wait for its headers.
type headerLimits struct {
	// pool and key: the backend key the attempt went with, whose answers
	// teach its bound; nil without backends.
	pool *route.Pool
	key  *route.Key
	// stream and size are the request's kind and size, as
	// route.Pool.FirstByteBound takes them.
	stream bool
	size   int
	// upstreamTimeout is UPSTREAM_TIMEOUT_S: the bound when nothing is
	// learnt, and the cap of a learnt one.
	upstreamTimeout time.Duration
}

// first is when a watch first looks at a call still without headers:
// at the pool's floor (no learnt bound is shorter), or with nothing to
// learn from, at UPSTREAM_TIMEOUT_S.
func (l headerLimits) first() time.Duration {
	if l.key == nil {
		return l.upstreamTimeout
	}
	return min(l.pool.FirstByteFloor, l.upstreamTimeout)
}

// check is what a watch does about a call that has waited for its
// headers: cut it (with cause), or look again after next. A bound not
// yet learnt is looked at again after the floor, since the pool's
// answers may teach one meanwhile.
//
// A whole answer past its learnt bound on a key that has answered other
// calls since it was sent is a long answer, not a dead key: it is given
// route.WholeAnswerBound before it is cut.
func (l headerLimits) check(sent time.Time, waited time.Duration) (next time.Duration, cause error, bound time.Duration) {
	if waited >= l.upstreamTimeout {
		return 0, errUpstreamTimeout, l.upstreamTimeout
	}
	if l.key == nil {
		return l.upstreamTimeout - waited, nil, 0
	}
	b, ok := l.pool.FirstByteBound(l.key, l.stream, l.size)
	switch {
	case !ok:
		return min(l.pool.FirstByteFloor, l.upstreamTimeout-waited), nil, 0
	case b >= l.upstreamTimeout:
		return l.upstreamTimeout - waited, nil, 0
	case waited >= b && !l.stream && l.key.AnsweredSince(sent):
		long := max(b, route.WholeAnswerBound(l.size))
		switch {
		case long >= l.upstreamTimeout:
			return l.upstreamTimeout - waited, nil, 0
		case waited >= long:
			return 0, errHeadersLate, long
		}
		return long - waited, nil, 0
	case waited >= b:
		return 0, errHeadersLate, b
	}
	return b - waited, nil, 0
}

// headerWatch cuts one upstream attempt whose headers are late, through
// its call's context. One per attempt: nothing of it changes once armed
// but its state, so a timer that fires as the attempt ends reads nothing
// the next attempt writes. A request's first attempt uses the one its
// exchange holds (most make one attempt: no allocation of its own).
type headerWatch struct {
	limits headerLimits
	sent   time.Time
	cut    context.CancelCauseFunc
	// mu orders the timer's making before its callback's first Reset,
	// which may fire before AfterFunc has returned it.
	mu    sync.Mutex
	timer *time.Timer
	state atomic.Int32 // watchWaiting, watchDone or watchCut
	// bound is the bound it cut at; read once state says watchCut.
	bound time.Duration
}

const (
	watchWaiting = iota
	watchDone
	watchCut
)

// watchHeaders arms w, unused, over an attempt sent at sent, which cut
// ends; nil w: a new one.
func watchHeaders(w *headerWatch, l headerLimits, sent time.Time, cut context.CancelCauseFunc) *headerWatch {
	if w == nil || w.timer != nil {
		w = new(headerWatch)
	}
	w.limits, w.sent, w.cut = l, sent, cut
	w.mu.Lock()
	w.timer = time.AfterFunc(l.first(), w.due)
	w.mu.Unlock()
	return w
}

// due looks at the call: cut it, or look again later. A Reset racing
// with stop is undone by whichever of the two sees the other's state.
func (w *headerWatch) due() {
	if w.state.Load() != watchWaiting {
		return
	}
	next, cause, bound := w.limits.check(w.sent, time.Since(w.sent))
	if cause != nil {
		w.bound = bound
		if w.state.CompareAndSwap(watchWaiting, watchCut) {
			w.cut(cause)
		}
		return
	}
	w.mu.Lock()
	w.timer.Reset(next)
	w.mu.Unlock()
	if w.state.Load() != watchWaiting {
		w.timer.Stop()
	}
}

// stop ends the watch: the headers are in, or the call failed. It
// reports whether the watch cut the call first, and at what bound.
func (w *headerWatch) stop() (cut bool, bound time.Duration) {
	if w == nil {
		return false, 0
	}
	if w.state.CompareAndSwap(watchWaiting, watchDone) {
		w.timer.Stop()
		return false, 0
	}
	return true, w.bound
}

// errHeadersLate is the cause of a call cut because its key's answer was
// later than the key's learnt bound.
var errHeadersLate = errors.New("upstream response headers later than the key's learnt bound")

// causeHeadersLate is an attempt cut for its key's learnt bound: tried
// again only on another key (the key may be slow, not silent, and
// running it).
const causeHeadersLate retry.Cause = "no_headers"

// errKeyNoHeaders answers a request whose call on key k was cut at bound,
// the bound learnt from its answers, and that no other key could take.
func errKeyNoHeaders(k *route.Key, bound time.Duration) *apierror.Error {
	return &apierror.Error{Status: http.StatusGatewayTimeout, Type: "timeout_error",
		Message: fmt.Sprintf("backend key %s sent no response headers within %s (four times the p99 of its answers' times to first byte) and is skipped for a while; no other key could take the request in time: retry later", k.Name, bound.Round(time.Millisecond))}
}

// errAnswerBroke answers a request whose answer broke off after it had
// begun (status): the upstream generated it, and bills it; sent again it
// would be generated, and billed, twice.
func errAnswerBroke(status int) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
		Message: fmt.Sprintf("the upstream's answer broke off after it had begun (status %d): the upstream has likely generated and billed it, so it was not sent again. Retry if a second answer is acceptable", status)}
}
