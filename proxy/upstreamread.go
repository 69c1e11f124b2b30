package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

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
