package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// errShuttingDown is the cause with which Abort cuts every request still
// being served when the drain deadline passes.
var errShuttingDown = errors.New("sluice is shutting down")

// errShutdownCut answers a request cut by Abort before anything was sent:
// it may have waited in line (never sent upstream) or been in flight.
var errShutdownCut = &apiError{Status: 529, Type: "overloaded_error", RetryAfter: 1,
	Message: "sluice is shutting down and could not finish this request within DRAIN_TIMEOUT_S; retry it, another instance or this one once restarted will serve it"}

// begin starts serving one Messages request under parent (its client's
// context): the context it returns also ends, with errShuttingDown, when
// Abort is called. end must be called once the request has been answered.
func (p *Proxy) begin(parent context.Context) (ctx context.Context, end func()) {
	p.active.Add(1)
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(p.stopping, func() { cancel(errShuttingDown) })
	return ctx, func() {
		stop()
		cancel(nil)
		p.active.Add(-1)
	}
}

// Abort cuts every Messages request still being served: those still in
// line are answered 529 "shutting down" with retry-after, those in flight
// have their upstream call cancelled and are answered the same way, and
// streams get an in-band error event. The server calls it when the drain
// deadline passes, then waits (Idle) for those answers before it closes
// the connections, so that nothing accepted ends without an answer.
func (p *Proxy) Abort() { p.stop(errShuttingDown) }

// Idle waits until every Messages request has been answered, or ctx ends.
func (p *Proxy) Idle(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for p.active.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// withUpstreamTimeout bounds the wait for an upstream's response headers
// on paths that no wave deadline covers: ctx is cancelled with
// errUpstreamTimeout once timeout passes, unless stop is called first
// (once the headers are in).
func withUpstreamTimeout(parent context.Context, timeout time.Duration) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	t := time.AfterFunc(timeout, func() { cancel(errUpstreamTimeout) })
	return ctx, func() { t.Stop() }
}

// errUpstreamTimeout is the cause of an upstream call cut by
// UPSTREAM_TIMEOUT_S.
var errUpstreamTimeout = errors.New("upstream response timeout")

// errResponseTooLarge marks a buffered upstream answer past
// maxResponseBody.
var errResponseTooLarge = errors.New("upstream response too large")

// readUpstreamBody reads a whole (non-streaming) upstream answer, up to
// maxResponseBody, cutting it if the upstream sends nothing for idle.
func readUpstreamBody(resp *http.Response, idle time.Duration) ([]byte, error) {
	watchdog := time.AfterFunc(idle, func() { resp.Body.Close() })
	defer watchdog.Stop()
	// One buffer: of the declared length when there is one (+1 for the
	// read that finds EOF), else a few KB that grow.
	size := int64(4 << 10)
	if resp.ContentLength > 0 && resp.ContentLength <= maxResponseBody {
		size = resp.ContentLength + 1
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > maxResponseBody {
			return nil, errResponseTooLarge
		}
		if n > 0 {
			watchdog.Reset(idle)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			if !watchdog.Stop() {
				return nil, fmt.Errorf("the upstream sent nothing for STREAM_IDLE_TIMEOUT_S=%s", idle)
			}
			return nil, err
		}
	}
}
