package park

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Response answers a parked request. It is an http.ResponseWriter with the
// semantics of net/http's own: headers are sent with the first Write or
// Flush; an answer with no Content-Length that ends before 2 KB is sent
// with its length, a longer or flushed one chunked; a missing Content-Type
// is sniffed; every answer has a Date. http.ResponseController reaches
// Flush and SetWriteDeadline.
//
// Its methods other than Context are for one goroutine at a time, like any
// ResponseWriter's.
type Response struct {
	pk     *Parker
	c      *conn
	ctx    context.Context
	cancel context.CancelFunc

	header    http.Header
	status    int
	committed bool
	chunked   bool
	bodyOK    bool  // the status allows a body
	declared  int64 // the Content-Length sent, or -1
	written   int64
	pending   []byte        // body written before the headers went out
	owed      []byte        // the end of WriteNow's last frame, which the socket did not take at once
	bw        *bufio.Writer // from writerPool, from a write to the next Flush; nil between
	werr      error

	w  watcher
	fd int32 // the socket's descriptor, when an epoller watches it

	// Shared with the watcher, under mu.
	mu        sync.Mutex
	keepAlive bool
	finished  bool        // Finish ran
	watching  bool        // the watcher has not reported yet
	gone      bool        // the watcher saw the connection end
	more      bool        // the watcher saw the client send more (its next request)
	next      []byte      // the client's next bytes, when they had to be read while parked
	idleTimer *time.Timer // an epoller's idle timeout
}

func newResponse(pk *Parker, c *conn, h http.Header, r *http.Request) *Response {
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	// h is the hijacked writer's header map, which net/http no longer
	// touches: it is taken over rather than copied.
	return &Response{pk: pk, c: c, ctx: ctx, cancel: cancel, header: h, declared: -1,
		keepAlive: !r.Close}
}

// Context is cancelled when the client hangs up before its answer is
// complete (or Shutdown cuts the connection). It carries r's values.
func (rw *Response) Context() context.Context { return rw.ctx }

// Header is the header map that the first Write or Flush sends.
func (rw *Response) Header() http.Header { return rw.header }

// Status is the status sent, or 0 if nothing has been sent yet.
func (rw *Response) Status() int { return rw.status }

// Written is how many body bytes the handler has written, sent or still
// buffered.
func (rw *Response) Written() int64 { return rw.written }

// WriteHeader sets the status; like net/http, a second call is ignored,
// and informational (1xx) statuses are not supported.
func (rw *Response) WriteHeader(code int) {
	if rw.status != 0 || code < 200 || code > 999 {
		return
	}
	rw.status = code
	rw.bodyOK = code != http.StatusNoContent && code != http.StatusNotModified
	if cl := rw.header.Get("Content-Length"); cl != "" && rw.bodyOK {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			rw.declared = n
		} else {
			rw.header.Del("Content-Length") // not a length: send it chunked
		}
	}
}

// errNoAnswer marks a Response finished with nothing sent to a client that
// had gone: no status line either.
var errNoAnswer = errors.New("park: the client left before its answer began")

// bufferBeforeChunking is how much body waits for the handler to finish,
// so that a short answer goes out with its length rather than chunked (the
// same size as net/http's).
const bufferBeforeChunking = 2048

// Write sends p as part of the body.
func (rw *Response) Write(p []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if !rw.bodyOK {
		return 0, http.ErrBodyNotAllowed
	}
	if rw.werr != nil {
		return 0, rw.werr
	}
	if rw.declared >= 0 && rw.written+int64(len(p)) > rw.declared {
		return 0, http.ErrContentLength
	}
	if !rw.committed {
		if rw.declared < 0 && len(rw.pending)+len(p) <= bufferBeforeChunking {
			rw.pending = append(rw.pending, p...)
			rw.written += int64(len(p))
			return len(p), nil
		}
		rw.commit(false)
	}
	rw.written += int64(len(p))
	return len(p), rw.writeBody(p)
}

// Flush sends the headers and all the body written so far.
func (rw *Response) Flush() { _ = rw.FlushError() }

// FlushError is Flush, reporting a failed write.
func (rw *Response) FlushError() error {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	rw.commit(false)
	if rw.werr == nil {
		rw.werr = rw.writer().Flush()
	}
	// Nothing is buffered now: the buffer goes back to the pool until the
	// next write, so that a stream silent between bursts holds none.
	rw.putWriter()
	return rw.werr
}

// writer is the buffer the answer is written through, taken from the pool
// when there is none.
func (rw *Response) writer() *bufio.Writer {
	if rw.bw == nil {
		rw.bw = writerPool.Get().(*bufio.Writer)
		rw.bw.Reset(rw.c.Conn)
		if len(rw.owed) > 0 {
			// What the socket did not take of WriteNow's last frame goes
			// first; a failure to send it is the buffer's, and Flush's.
			rw.bw.Write(rw.owed)
			rw.owed = nil
		}
	}
	return rw.bw
}

// putWriter gives the buffer back to the pool, if there is one.
func (rw *Response) putWriter() {
	if rw.bw != nil {
		rw.bw.Reset(nil)
		writerPool.Put(rw.bw)
		rw.bw = nil
	}
}

// SetWriteDeadline bounds the writes to the client, as
// http.ResponseController.SetWriteDeadline does for net/http's writers.
func (rw *Response) SetWriteDeadline(t time.Time) error { return rw.c.Conn.SetWriteDeadline(t) }

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}

// commit sends the status line and headers, then any pending body. final
// says the handler is done, so that a short body's length is known.
func (rw *Response) commit(final bool) {
	if rw.committed {
		return
	}
	rw.committed = true
	rw.writer().Write(rw.head(final, nil))
	if len(rw.pending) > 0 {
		rw.werr = rw.writeBody(rw.pending)
		rw.pending = nil
	}
}

// head appends the status line and headers to b: the framing is chosen
// here (a length, chunked, or no body). It may run again after a WriteNow
// that sent nothing, and chooses the same again.
func (rw *Response) head(final bool, b []byte) []byte {
	h := rw.header
	rw.chunked = false
	if rw.bodyOK {
		if _, typed := h["Content-Type"]; !typed && len(rw.pending) > 0 {
			h.Set("Content-Type", http.DetectContentType(rw.pending))
		}
		switch {
		case rw.declared >= 0:
		case final:
			rw.declared = int64(len(rw.pending))
			h.Set("Content-Length", strconv.Itoa(len(rw.pending)))
		default:
			rw.chunked = true
			h.Set("Transfer-Encoding", "chunked")
		}
	} else {
		h.Del("Content-Length")
		h.Del("Transfer-Encoding")
	}
	if _, dated := h["Date"]; !dated {
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	rw.mu.Lock()
	if rw.pk.isClosing() || h.Get("Connection") == "close" {
		rw.keepAlive = false
	}
	if !rw.keepAlive {
		h.Set("Connection", "close")
	}
	rw.mu.Unlock()

	text := http.StatusText(rw.status)
	if text == "" {
		text = "status code " + strconv.Itoa(rw.status)
	}
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(rw.status), 10)
	b = append(b, ' ')
	b = append(b, text...)
	b = append(b, "\r\n"...)
	buf := bytes.NewBuffer(b)
	h.Write(buf)
	buf.WriteString("\r\n")
	return buf.Bytes()
}

func (rw *Response) writeBody(p []byte) error {
	if rw.werr != nil || len(p) == 0 {
		return rw.werr
	}
	bw := rw.writer()
	if rw.chunked {
		size := strconv.AppendInt(bw.AvailableBuffer(), int64(len(p)), 16)
		bw.Write(append(size, "\r\n"...))
	}
	if _, err := bw.Write(p); err != nil {
		rw.werr = err
		return err
	}
	if rw.chunked {
		_, rw.werr = bw.WriteString("\r\n")
	}
	return rw.werr
}

// Finish completes the answer (sending it, if the handler wrote nothing,
// as an empty 200) and lets the connection go: back to the server once the
// client sends its next request, or closed if the client asked for that,
// the answer was cut short, or the Parker is shutting down. A client seen
// gone (its FIN: one that only half-closed its side sends it too) to which
// nothing was written gets no answer at all, rather than an empty 200: the
// connection is closed. Call it exactly once, when the answer is complete;
// the Response must not be used after.
func (rw *Response) Finish() {
	switch {
	case rw.status == 0 && rw.ctx.Err() != nil:
		rw.werr = errNoAnswer // nothing committed, nothing sent; closed below
	case rw.status == 0:
		rw.WriteHeader(http.StatusOK)
		fallthrough
	default:
		rw.commit(true)
	}
	if rw.chunked && rw.werr == nil {
		_, rw.werr = rw.writer().WriteString("0\r\n\r\n")
	}
	if rw.werr == nil && rw.bw != nil {
		rw.werr = rw.bw.Flush()
	}
	rw.putWriter()
	rw.cancel()

	rw.mu.Lock()
	rw.finished = true
	if rw.werr != nil || (rw.declared >= 0 && rw.written != rw.declared) {
		rw.keepAlive = false // the client cannot tell where this answer ends
	}
	// Shutdown may have begun since the headers went out: it closes only
	// the idle connections it sees, so this one must not go idle now.
	// Checked under rw.mu, the lock closeIfIdle takes after closing is set.
	if rw.pk.isClosing() {
		rw.keepAlive = false
	}
	watching, keepAlive := rw.watching, rw.keepAlive
	if watching && keepAlive {
		// The watch goes on for the next request, for as long as an idle
		// connection may stay open.
		rw.w.idle(rw, rw.pk.idleTimeout)
	}
	rw.mu.Unlock()
	switch {
	case watching && keepAlive:
	case watching:
		rw.endWatch()
	default:
		rw.release()
	}
}

// endWatch ends the watch early: the connection is to be closed.
func (rw *Response) endWatch() {
	if rw.w.stop(rw) {
		rw.event(nil, true) // no event will come: this is it
	}
}

// event is the watcher's report, once per watch: the client sent more
// (data holds what had to be read of it, if anything) or the connection
// ended. Before the answer is complete, an end means the client left: the
// request's context is cancelled. After it, the connection goes back to
// the server or is closed.
func (rw *Response) event(data []byte, gone bool) {
	rw.mu.Lock()
	rw.watching = false
	rw.next = append(rw.next, data...)
	if gone {
		rw.gone = true
	} else {
		rw.more = true
	}
	finished := rw.finished
	rw.mu.Unlock()
	if !finished {
		if gone {
			rw.cancel()
		}
		return // Finish lets the connection go
	}
	rw.release()
}

// stopIdleTimer takes the idle timer, if any, for its owner to stop.
func (rw *Response) stopIdleTimer() *time.Timer {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	t := rw.idleTimer
	rw.idleTimer = nil
	return t
}

// release hands the connection back to the server or closes it, once both
// the answer and the watch are done.
func (rw *Response) release() {
	rw.mu.Lock()
	keep := rw.keepAlive && !rw.gone && (rw.more || len(rw.next) > 0)
	next := rw.next
	t := rw.idleTimer // armed, if an event came just before Finish did
	rw.idleTimer = nil
	rw.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	if !keep || rw.pk.isClosing() {
		rw.c.Conn.Close()
		rw.pk.done(rw)
		return
	}
	rw.c.Conn.SetDeadline(time.Time{}) // the handler's write deadline must not outlive its answer
	rw.c.next = next
	// Forgotten before it is handed back: from then on the connection is
	// the server's, and Shutdown must not cut it as a parked one.
	rw.pk.done(rw)
	rw.c.addr.l.handBack(rw.c)
}

// closeIfIdle closes the connection if its answer is complete and it only
// waits for the client's next request; Shutdown calls it.
func (rw *Response) closeIfIdle() {
	rw.mu.Lock()
	idle := rw.finished && rw.watching
	rw.mu.Unlock()
	if idle {
		rw.endWatch()
	}
}

var _ http.Flusher = (*Response)(nil)
var _ interface{ FlushError() error } = (*Response)(nil)
