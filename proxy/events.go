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
	"sync"
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
	go pipe.writeTo(ex.w, resp.StatusCode, idle)

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
	send := func(ev []byte) error {
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
			return pipe.put(ctx, ev)
		}
		// Waiting for the client to make room is not the upstream's
		// silence.
		watchdog.Stop()
		defer watchdog.Reset(idle)
		return pipe.put(ctx, ev)
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

// errClientWrite marks a failure to write to the client.
var errClientWrite = errors.New("write to client")

// errClientStalled marks a client cut for taking no bytes while the
// upstream waited on it.
var errClientStalled = fmt.Errorf("%w: the client took no bytes for STREAM_CLIENT_STALL_S while the upstream waited on it", errClientWrite)

// errEventTooLarge marks an upstream event longer than maxEventSize.
var errEventTooLarge = errors.New("upstream event too large")

// streamPipe carries a stream's events from the goroutine that reads the
// upstream (put) to the one that writes the client (writeTo), holding at
// most max bytes between them.
type streamPipe struct {
	max    int
	shared *byteBudget   // the budget of all streams' events (streamBufferBudget)
	wake   chan struct{} // the writer has something new to do; capacity 1
	room   chan struct{} // the writer took bytes, or failed; capacity 1
	done   chan struct{} // closed when the writer has finished

	// stall, if not zero, is how long the client may take no bytes while
	// put waits for room (STREAM_CLIENT_STALL_S) before cut ends the
	// writes to it. acked, if not nil, reports the bytes the client's TCP
	// has acknowledged: without it, taking bytes is seen only when a write
	// completes.
	stall time.Duration
	acked func() uint64
	cut   func()

	mu        sync.Mutex
	buf       []byte    // events put and not yet taken by the writer
	closed    bool      // nothing more will be put
	err       error     // the writer failed: the client is gone or stopped reading
	tookAt    time.Time // when the client was last seen taking bytes
	lastAcked uint64    // acked's value then

	// deadlines orders the writer's renewals of its write deadline and
	// cut, so that a renewal cannot undo a cut.
	deadlines sync.Mutex
	isCut     bool
}

func newStreamPipe(max int, shared *byteBudget) *streamPipe {
	return &streamPipe{max: max, shared: shared, wake: make(chan struct{}, 1), room: make(chan struct{}, 1), done: make(chan struct{}),
		tookAt: time.Now()}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// put adds one whole event, waiting while the pipe is full or the shared
// budget spent. An event always fits in an empty pipe, so every stream
// makes progress. It fails once the writer has failed, or when ctx ends
// while it waits.
//
// While it waits the upstream waits on the client, and the request holds
// its slot: a client that has then taken no bytes for stall is cut, every
// byte in the pipe and the socket's buffers unread. The check runs every
// stall/4, so the slot is given back within 1.25 × stall of the later of
// the client's last byte taken and the wait's start. A client that reads
// at any pace, however slow, is never cut so: each byte it takes moves
// its acknowledged count.
func (sp *streamPipe) put(ctx context.Context, ev []byte) error {
	var tick <-chan time.Time
	sp.mu.Lock()
	for sp.err == nil {
		if len(sp.buf) == 0 {
			sp.shared.held.Add(int64(len(ev)))
			break
		}
		if len(sp.buf)+len(ev) <= sp.max && sp.shared.reserve(int64(len(ev))) {
			break
		}
		sp.mu.Unlock()
		if tick == nil && sp.stall > 0 {
			t := time.NewTicker(sp.stall / 4)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-sp.room:
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			if sp.stalled() {
				sp.fail(errClientStalled)
				return errClientStalled
			}
		}
		sp.mu.Lock()
	}
	err := sp.err
	if err == nil {
		sp.buf = append(sp.buf, ev...)
	}
	sp.mu.Unlock()
	signal(sp.wake)
	return err
}

// stalled reports whether the client has taken no bytes for stall.
func (sp *streamPipe) stalled() bool {
	var acked uint64
	if sp.acked != nil {
		acked = sp.acked()
	}
	now := time.Now()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.acked != nil && acked != sp.lastAcked {
		sp.lastAcked, sp.tookAt = acked, now
	}
	return now.Sub(sp.tookAt) >= sp.stall
}

// fail ends the stream for err: the writer stops, and cut ends a write
// blocked on the client.
func (sp *streamPipe) fail(err error) {
	sp.mu.Lock()
	if sp.err == nil {
		sp.err = err
	}
	sp.mu.Unlock()
	signal(sp.wake)
	sp.deadlines.Lock()
	sp.isCut = true
	if sp.cut != nil {
		sp.cut()
	}
	sp.deadlines.Unlock()
}

// renew sets the next write's deadline, unless the writes were cut.
func (sp *streamPipe) renew(rc *http.ResponseController, idle time.Duration) bool {
	sp.deadlines.Lock()
	defer sp.deadlines.Unlock()
	if sp.isCut {
		return false
	}
	_ = rc.SetWriteDeadline(time.Now().Add(idle))
	return true
}

// putLast adds sluice's own last event, past the bounds: it is small, and
// it must reach the client.
func (sp *streamPipe) putLast(ev []byte) {
	sp.mu.Lock()
	if sp.err == nil {
		sp.shared.held.Add(int64(len(ev)))
		sp.buf = append(sp.buf, ev...)
	}
	sp.mu.Unlock()
	signal(sp.wake)
}

// close says nothing more will be put; the writer finishes what is left.
func (sp *streamPipe) close() {
	sp.mu.Lock()
	sp.closed = true
	sp.mu.Unlock()
	signal(sp.wake)
}

// writeTo sends the status and then every event put to w, each write under
// a deadline of idle, until the pipe is closed and empty or a write fails.
func (sp *streamPipe) writeTo(w http.ResponseWriter, status int, idle time.Duration) {
	defer close(sp.done)
	rc := http.NewResponseController(w)
	w.WriteHeader(status)
	err := flushTo(rc)
	var spare []byte
	for err == nil {
		sp.mu.Lock()
		for len(sp.buf) == 0 && !sp.closed && sp.err == nil {
			sp.mu.Unlock()
			<-sp.wake
			sp.mu.Lock()
		}
		if sp.err != nil { // cut
			err = sp.err
			sp.mu.Unlock()
			break
		}
		take, last := sp.buf, sp.closed && len(sp.buf) == 0
		sp.buf = spare[:0]
		sp.mu.Unlock()
		signal(sp.room)
		if last {
			return
		}
		if werr := writeRenewingWhile(w, rc, take, idle, sp.renew); werr != nil {
			err = fmt.Errorf("%w: %v", errClientWrite, werr)
		} else {
			err = flushTo(rc)
		}
		sp.shared.release(int64(len(take)))
		spare = take
		sp.mu.Lock()
		sp.tookAt = time.Now()
		if sp.err != nil { // cut
			err = sp.err
		}
		sp.mu.Unlock()
	}
	sp.mu.Lock()
	if sp.err == nil {
		sp.err = err
	}
	sp.shared.release(int64(len(sp.buf)))
	sp.buf = nil
	sp.mu.Unlock()
	signal(sp.room)
}

// writeChunk is how much of an answer is written under one write deadline.
const writeChunk = 32 << 10

// writeRenewing writes data to w in chunks of writeChunk, each under a
// write deadline of idle from its start: a client is cut only when it
// takes nothing for idle, not when a large write takes longer than idle
// at the pace it reads. Not every ResponseWriter supports deadlines (a
// recorder in tests); where it does not, the writes simply have none.
func writeRenewing(w io.Writer, rc *http.ResponseController, data []byte, idle time.Duration) error {
	return writeRenewingWhile(w, rc, data, idle, func(rc *http.ResponseController, idle time.Duration) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(idle))
		return true
	})
}

// writeRenewingWhile is writeRenewing with renew setting each deadline;
// it stops with errClientStalled once renew reports false.
func writeRenewingWhile(w io.Writer, rc *http.ResponseController, data []byte, idle time.Duration, renew func(*http.ResponseController, time.Duration) bool) error {
	for len(data) > 0 {
		n := min(len(data), writeChunk)
		if !renew(rc, idle) {
			return errClientStalled
		}
		if _, err := w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// wait blocks until the writer has finished: the client has every event,
// or it failed.
func (sp *streamPipe) wait() { <-sp.done }

func flushTo(rc *http.ResponseController) error {
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("%w: %v", errClientWrite, err)
	}
	return nil
}

// copyEvents copies SSE events from src to send, one complete event (lines
// up to a blank line) per call. progress is called whenever a line
// arrives, with the event read so far (that line included). At EOF a trailing partial event is sent as is. It returns nil
// at EOF, send's error, errEventTooLarge for an event past maxEventSize,
// or src's read error.
func copyEvents(send func(ev []byte) error, src io.Reader, progress func(event []byte)) error {
	br := bufio.NewReaderSize(src, 16<<10)
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
				return send(event)
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
			if err := send(event); err != nil {
				return err
			}
			event = event[:0]
			lineStart = 0
		}
	}
}
