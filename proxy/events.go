package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/upstream"
)

// maxEventSize bounds one upstream SSE event. The API's largest events (a
// tool call's whole input in one delta, a long thinking signature) are
// far smaller; an event past it means an upstream gone wrong, and sluice
// would otherwise buffer it without limit.
const maxEventSize = 8 << 20

// streamBufferSize bounds the events read from the upstream and not yet
// written to the client. The upstream is read as fast as it sends, so a
// slow client costs its slot nothing as long as the rest of its stream
// fits here (a long answer of 4,000 output tokens is about 600 KB of
// events); past it the upstream waits for the client, and a client that
// takes no bytes for STREAM_CLIENT_STALL_S while it waits is cut (see
// streamPipe.put), so that a client that reads nothing gives its slot back
// long before STREAM_IDLE_TIMEOUT_S.
const streamBufferSize = 1 << 20

// streamBufferBudget bounds the events held for all streams together,
// beyond one event each: a stream whose upstream has finished keeps its
// events until its client takes them, and no slot or queue bounds how
// many such clients there are. Past it a stream's upstream waits for its
// client, as when its own buffer is full.
const streamBufferBudget = 64 << 20

// relayEvents relays an SSE response event by event. It runs while the
// request holds its slot and returns as soon as the upstream's stream has
// ended: the events go to the client through a streamPipe, written by a
// goroutine of their own, so that a client that reads slowly never keeps
// the slot longer than the upstream takes to answer. Only whole events are
// written, so that an error sluice adds in-band always lands on an event
// boundary where the SDKs' parsers can read it. A stream that stays silent
// for the idle timeout is ended with an in-band timeout_error; cancel
// aborts the upstream call.
func (ex *exchange) relayEvents(ctx context.Context, cancel context.CancelCauseFunc, resp *http.Response, firstToken func()) error {
	p := ex.p
	idle := p.cfg.StreamIdleTimeout
	pipe := newStreamPipe(streamBufferSize, p.streamBytes)
	if c, ok := ex.r.Context().Value(connKey{}).(net.Conn); ok && p.cfg.StreamClientStall > 0 {
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
	var stalled atomic.Bool
	watchdog := time.AfterFunc(idle, func() {
		stalled.Store(true)
		cancel(nil)
	})
	defer watchdog.Stop()
	// ended is set once the stream's last event (message_stop, or an
	// error event) has come; cut, when what came last at EOF was half an
	// event, which is not relayed.
	var ended, cut bool
	send := func(ev []byte, more bool) error {
		if !bytes.HasSuffix(ev, []byte("\n\n")) && !bytes.HasSuffix(ev, []byte("\n\r\n")) {
			cut = true // only at EOF: no blank line ended it
			return nil
		}
		if bytes.HasPrefix(ev, evMessageStop) || bytes.HasPrefix(ev, evError) {
			ended = true
		}
		tally.observe(ev)
		if firstToken != nil && bytes.HasPrefix(ev, evContentBlockDelta) {
			firstToken()
			firstToken = nil
		}
		if bytes.HasPrefix(ev, evPing) {
			// Not progress (below): the watchdog runs on through it.
			return pipe.put(ctx, ev, more)
		}
		// Waiting for the client to make room is not the upstream's
		// silence.
		watchdog.Stop()
		defer watchdog.Reset(idle)
		return pipe.put(ctx, ev, more)
	}
	// Any line of an event is progress, but a ping is not: the API
	// sends pings to keep a connection open, so an upstream that sends
	// nothing else would otherwise hold its gate slot for ever.
	progress := func(event []byte) {
		if !bytes.HasPrefix(event, evPing) {
			watchdog.Reset(idle)
		}
	}
	err := copyEvents(send, resp.Body, progress)
	var inBand []byte
	switch {
	case err == nil && (ended || resp.StatusCode != http.StatusOK):
	case err == nil:
		// The upstream (or a gateway before it) ended the response
		// cleanly before the stream's end: relayed as it is, the SDKs
		// would return a partial Message without an error.
		inBand = apierror.SSE("api_error", "the upstream's stream ended before message_stop, so the answer is incomplete; retry the request")
		err = errStreamIncomplete
		p.log.Warn("upstream stream ended before message_stop", "upstream", p.upstreamName(), "half_event", cut)
	case errors.Is(err, errClientWrite):
		cancel(nil) // the client is gone or stopped reading: stop the upstream too
	case errors.Is(err, errEventTooLarge):
		inBand = apierror.SSE("api_error", fmt.Sprintf(
			"the upstream sent an event larger than %d MB, so sluice ended the stream; retry the request", maxEventSize>>20))
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
		p.log.Warn("upstream stream broke", "upstream", p.upstreamName(), "err", err)
		inBand = apierror.SSE("api_error", "the upstream's stream broke before it ended; retry the request")
	}
	if inBand != nil {
		pipe.putLast(inBand)
	}
	pipe.close()
	return err
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

// errEventTooLarge marks an upstream event longer than maxEventSize.
var errEventTooLarge = errors.New("upstream event too large")

// copyEvents copies SSE events from src to send, one complete event (lines
// up to a blank line) per call; more says that another complete event has
// already been read and follows at once, so that the events that arrived
// together can be written to the client together (one write, one flush),
// while one that came alone is never held back waiting for the next.
// progress is called whenever a line arrives, with the event read so far
// (that line included). At EOF a trailing partial event is sent as is. It
// returns nil at EOF, send's error, errEventTooLarge for an event past
// maxEventSize, or src's read error.
func copyEvents(send func(ev []byte, more bool) error, src io.Reader, progress func(event []byte)) error {
	// 1 KB: an agent's stream holds it for as long as the stream is open,
	// most of it silent (16 KB cost 12 KB more per open stream, and 4 KB
	// 3 KB more; docs/benchmarks.md, issue 30). The transport's own 4 KB
	// buffer is beneath src, so a smaller one here costs copies, not
	// reads from the socket. A line longer than it is read in pieces
	// (ErrBufferFull below).
	br := bufio.NewReaderSize(src, 1<<10)
	var event []byte
	lineStart := 0 // where the line being read began in event
	for {
		chunk, err := br.ReadSlice('\n')
		event = append(event, chunk...)
		if len(event) > maxEventSize {
			return errEventTooLarge
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue // a long line: keep reading it
		case err == io.EOF:
			if len(event) > 0 {
				return send(event, false)
			}
			return nil
		case err != nil:
			return err
		}
		progress(event)
		// The whole line, not the last chunk of it: a long line can end with
		// a chunk of just "\n" when it fills the buffer exactly.
		line := event[lineStart:]
		lineStart = len(event)
		if len(line) == 1 || (len(line) == 2 && line[0] == '\r') {
			// A blank line ends the event.
			if err := send(event, eventBuffered(br)); err != nil {
				return err
			}
			event = event[:0]
			lineStart = 0
			if br.Buffered() == 0 && cap(event) > 1<<10 {
				// The read that follows may wait through a silence: a
				// long event's buffer is not kept for it.
				event = nil
			}
		}
	}
}

// eventBuffered reports whether br holds a whole event, read from an
// event boundary: a blank line within its buffered bytes.
func eventBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return len(b) > 0 && (b[0] == '\n' || bytes.HasPrefix(b, []byte("\r\n")) ||
		bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n")))
}
