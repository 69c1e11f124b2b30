package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/sse"
	"github.com/sluicehq/sluice/upstream"
)

// streamBufferSize bounds the events read from the upstream and not yet
// written to the client. The upstream is read as fast as it sends, so a
// slow client costs its slot nothing as long as the rest of its stream
// fits here (a long answer of 4,000 output tokens is about 600 KB of
// events); past it the upstream waits for the client, and a client that
// takes no bytes for STREAM_CLIENT_STALL_S while it waits is cut (see
// streamPipe.put), so that a client that reads nothing gives its slot back
// long before STREAM_IDLE_TIMEOUT_S.
const streamBufferSize = 1 << 20

// streamBufferQuota bounds the events held for all streams together,
// beyond one event each: a stream whose upstream has finished keeps its
// events until its client takes them, and no slot or queue bounds how
// many such clients there are. Past it a stream's upstream waits for its
// client, as when its own buffer is full.
const streamBufferQuota = 64 << 20

// relayEvents relays an SSE response event by event. It runs while the
// request holds its slot and returns as soon as the upstream's stream has
// ended: the events go to the client through a streamPipe, written by a
// goroutine of their own, so that a client that reads slowly never keeps
// the slot longer than the upstream takes to answer. Only whole events are
// written, so that an error sluice adds in-band always lands on an event
// boundary where the SDKs' parsers can read it. A stream that stays silent
// for the idle timeout is ended with an in-band timeout_error; cancel
// aborts the upstream call.
func (ex *exchange) relayEvents(ctx context.Context, cancel context.CancelCauseFunc, resp *http.Response, t turn) error {
	p := ex.p
	idle := p.cfg.StreamIdleTimeout
	pipe := newStreamPipe(streamBufferSize, p.streamBytes)
	c, ok := ex.r.Context().Value(connKey{}).(net.Conn)
	if ok {
		pipe.progress = ackedBytes(c)
	}
	if ok && p.cfg.StreamClientStall > 0 {
		pipe.stall, pipe.acked = p.cfg.StreamClientStall, ackedBytes(c)
		pipe.cut = func() {
			p.metrics.ClientStalls.Inc()
			// A deadline passed, not a close: a parked connection is
			// closed only by its Response, after its watch.
			c.SetWriteDeadline(time.Unix(1, 0))
		}
	}
	defer pipe.close() // whatever happens here, the writer finishes and complete's wait ends
	ex.out = pipe
	h := ex.w.Header()
	upstream.CopyHeader(h, resp.Header)
	h.Del("Content-Length")
	pipe.start(ex.w, resp.StatusCode, idle)

	var tally streamUsage
	defer func() {
		if tally.seen {
			ex.rec.cutOutput, ex.rec.cut = tally.estimate()
			ex.used(tally.model, tally.u)
		}
	}()
	// The watchdog ends a stream whose upstream has sent nothing but
	// pings for idle. Each event only notes the time (progress): a timer
	// reset for each one cost more than the note (docs/streams.md). When
	// the timer fires it looks at the note, and waits on for what is left
	// of idle since then. Waiting for the client to make room (put) is
	// not the upstream's silence: the note is taken after it.
	var stalled atomic.Bool
	var lastProgress, putting atomic.Int64 // lastProgress: since began; putting: puts under way
	began := time.Now()
	note := func() { lastProgress.Store(int64(time.Since(began))) }
	var watchdog *time.Timer
	watchdog = time.AfterFunc(idle, func() {
		quiet := time.Since(began) - time.Duration(lastProgress.Load())
		switch {
		case putting.Load() > 0:
			watchdog.Reset(idle)
		case quiet < idle:
			watchdog.Reset(idle - quiet)
		default:
			stalled.Store(true)
			cancel(nil)
		}
	})
	defer watchdog.Stop()
	// ended is set once the stream's last event (message_stop, or an
	// error event) has come; cut, when what came last at EOF was half an
	// event, which is not relayed.
	var ended, cut bool
	firstToken := false // its time is told
	send := func(ev []byte, more bool) error {
		if !bytes.HasSuffix(ev, []byte("\n\n")) && !bytes.HasSuffix(ev, []byte("\n\r\n")) {
			cut = true // only at EOF: no blank line ended it
			return nil
		}
		if bytes.HasPrefix(ev, sse.MessageStop) || bytes.HasPrefix(ev, sse.ErrorEvent) {
			ended = true
		}
		tally.observe(ev)
		if !firstToken && bytes.HasPrefix(ev, sse.ContentBlockDelta) {
			// The gate's adaptive limit learns from the time to first
			// token, which a stream's length does not stretch.
			t.FirstToken(time.Since(ex.sent))
			firstToken = true
		}
		if bytes.HasPrefix(ev, sse.Ping) {
			// Not progress (below): the watchdog runs on through it.
			return pipe.put(ctx, ev, more)
		}
		putting.Add(1)
		err := pipe.put(ctx, ev, more)
		note()
		putting.Add(-1)
		return err
	}
	// Any line of an event is progress, but a ping is not: the API
	// sends pings to keep a connection open, so an upstream that sends
	// nothing else would otherwise hold its gate slot for ever.
	progress := func(event []byte) {
		if !bytes.HasPrefix(event, sse.Ping) {
			note()
		}
	}
	err := sse.Copy(send, resp.Body, progress)
	var inBand []byte
	switch {
	case err == nil && (ended || resp.StatusCode != http.StatusOK):
	case err == nil:
		// The upstream (or a gateway before it) ended the response
		// cleanly before the stream's end: relayed as it is, the SDKs
		// would return a partial Message without an error.
		inBand = apierror.SSE("api_error", "the upstream's stream ended before message_stop, so the answer is incomplete; retry the request")
		err = sse.ErrStreamIncomplete
		p.log.Warn("upstream stream ended before message_stop", "upstream", ex.upstreamName(), "half_event", cut)
	case errors.Is(err, errClientWrite):
		cancel(nil) // the client is gone or stopped reading: stop the upstream too
	case errors.Is(err, sse.ErrEventTooLarge):
		inBand = apierror.SSE("api_error", fmt.Sprintf(
			"the upstream sent an event larger than %d MB, so sluice ended the stream; retry the request", sse.MaxEventSize>>20))
	case stalled.Load():
		inBand = apierror.SSE("timeout_error", fmt.Sprintf(
			"the upstream sent no event but pings for STREAM_IDLE_TIMEOUT_S=%s, so sluice ended the stream; retry the request", idle))
		err = fmt.Errorf("stream idle for %s", idle)
	case context.Cause(ctx) == errShuttingDown:
		inBand = apierror.SSE("overloaded_error", "sluice is shutting down and cut this stream before it ended; retry the request")
		err = errShuttingDown
	case ctx.Err() != nil:
		err = ctx.Err() // the client left
	default:
		// The read error names the upstream's address (read tcp
		// a->b: ...): for the operator's log, not the client, as
		// mapError keeps it.
		p.log.Warn("upstream stream broke", "upstream", ex.upstreamName(), "err", err)
		inBand = apierror.SSE("api_error", "the upstream's stream broke before it ended; retry the request")
	}
	if inBand != nil {
		pipe.putLast(inBand)
	}
	pipe.close()
	return err
}
