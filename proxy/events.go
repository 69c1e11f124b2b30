package proxy

import (
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
		if bytes.HasPrefix(ev, evMessageStop) || bytes.HasPrefix(ev, evError) {
			ended = true
		}
		tally.observe(ev)
		if !firstToken && bytes.HasPrefix(ev, evContentBlockDelta) {
			// The gate's adaptive limit learns from the time to first
			// token, which a stream's length does not stretch.
			t.FirstToken(time.Since(ex.sent))
			firstToken = true
		}
		if bytes.HasPrefix(ev, evPing) {
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
		if !bytes.HasPrefix(event, evPing) {
			note()
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
		p.log.Warn("upstream stream ended before message_stop", "upstream", ex.upstreamName(), "half_event", cut)
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
		p.log.Warn("upstream stream broke", "upstream", ex.upstreamName(), "err", err)
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
// progress is called after each read that completed a line, with the
// event being read then (that line included); an event that a read
// completed goes to send instead. At EOF a trailing partial event is sent
// as is. It returns nil at EOF, send's error, errEventTooLarge for an
// event past maxEventSize, or src's read error.
//
// It reads everything src has at once, into a buffer taken from a pool
// while there are bytes to hold: an agent's stream is silent most of the
// time it is open (thinking, a tool call), and it waits for the next
// event through a one-byte read, holding no buffer; the rest of what came
// is then read in one go. A buffer of its own sized for a silence (1 KB)
// split a burst into reads of a few events each, and a write to the client
// for each read (docs/streams.md).
func copyEvents(send func(ev []byte, more bool) error, src io.Reader, progress func(event []byte)) error {
	var first [1]byte
	var buf []byte // the event being read (from 0), then what was read after it
	scanned := 0   // buf[:scanned] holds no blank line: a long event's bytes are looked at once
	defer func() { putRelayBuf(buf) }()
	for {
		if len(buf) == 0 {
			putRelayBuf(buf)
			buf = nil
			n, err := src.Read(first[:])
			if n == 0 {
				switch {
				case err == io.EOF:
					return nil
				case err != nil:
					return err
				}
				continue
			}
			buf, scanned = append(getRelayBuf(), first[0]), 0
			if err != nil {
				if _, serr := sendEvents(send, &buf, 0, progress, err == io.EOF); serr != nil {
					return serr
				}
				return eofOrErr(err)
			}
		}
		if len(buf) == cap(buf) {
			if len(buf) > maxEventSize {
				return errEventTooLarge
			}
			buf = growRelayBuf(buf)
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		var serr error
		if scanned, serr = sendEvents(send, &buf, scanned, progress, err == io.EOF); serr != nil {
			return serr
		}
		if err != nil {
			return eofOrErr(err)
		}
	}
}

func eofOrErr(err error) error {
	if err == io.EOF {
		return nil
	}
	return err
}

// sendEvents sends the whole events at the start of *buf and keeps the
// rest (the start of the next event) at its front. At the source's end
// (last: EOF, not a failed read) the rest is sent too, as it is. An event
// past maxEventSize is errEventTooLarge. from is where to look for lines:
// *buf before it was looked at by the call before, and holds no blank
// line; it returns where the next call may start, the start of the rest's
// last line, unfinished.
func sendEvents(send func(ev []byte, more bool) error, buf *[]byte, from int, progress func(event []byte), last bool) (int, error) {
	b := *buf
	start := 0 // of the event being read
	var pending []byte
	lineEnd := -1 // the end of the last whole line of the event being read, past its newline
	for at := from; ; {
		i := bytes.IndexByte(b[at:], '\n')
		if i < 0 {
			break
		}
		i += at
		line := b[at : i+1]
		at = i + 1
		lineEnd = at
		if len(line) != 1 && (len(line) != 2 || line[0] != '\r') {
			continue
		}
		// A blank line ends the event; the one before it goes first. The
		// bound is checked on each whole event, not only on what a read
		// leaves over: a read may bring an event's end past the bound.
		tooLarge := at-start > maxEventSize
		if pending != nil {
			if err := send(pending, !tooLarge); err != nil {
				return 0, err
			}
		}
		if tooLarge {
			return 0, errEventTooLarge
		}
		pending = b[start:at]
		start, lineEnd = at, -1
	}
	if pending != nil {
		if err := send(pending, false); err != nil {
			return 0, err
		}
	}
	rest := b[start:]
	switch {
	case len(rest) > maxEventSize:
		return 0, errEventTooLarge
	case last && len(rest) > 0:
		if err := send(rest, false); err != nil {
			return 0, err
		}
		rest = nil
	case lineEnd > start:
		progress(b[start:lineEnd])
	}
	*buf = b[:copy(b, rest)]
	switch {
	case lineEnd > start:
		return lineEnd - start, nil
	case start == 0:
		return from, nil // no line ended: the next call starts where this one did
	}
	return 0, nil
}

// relayBufs are copyEvents' read buffers, held only while a stream has
// bytes to hold; a buffer grown for a long event is not pooled. Each is
// relayReadSize: a burst of an answer's events, and most single events,
// in one read.
var relayBufs = bytePool{size: 16 << 10}

func getRelayBuf() []byte  { return relayBufs.get() }
func putRelayBuf(b []byte) { relayBufs.put(b) }

// growRelayBuf makes room after buf's bytes for a long event.
func growRelayBuf(buf []byte) []byte {
	grown := make([]byte, len(buf), 2*cap(buf))
	copy(grown, buf)
	putRelayBuf(buf)
	return grown
}
