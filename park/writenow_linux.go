package park

import (
	"strconv"
	"sync"
	"syscall"
)

// WriteNow sends p as the next piece of a chunked body without waiting for
// the client, from the caller's goroutine: a stream's relay writes each
// event (or the events of one read from the upstream) as it comes, one
// system call, with no hand-off to a writer goroutine and no write
// deadline to renew (docs/streams.md). It reports false when
// it cannot, and then nothing was sent and p is still the caller's to
// write with Write and Flush: the answer is not a chunked one, bytes are
// buffered or pending, a write failed or its deadline passed (a cut), the
// connection is no socket, or the socket takes nothing now (its buffer is
// full: the client is slow). The status and headers go out with the first
// piece if they have not yet (p may then be empty). When it reports true, p
// was taken whole; what the socket did not take at once is kept, and goes
// out first with the next Write or Flush (Owes reports it).
func (rw *Response) WriteNow(p []byte) bool {
	if rw.status == 0 || !rw.bodyOK || rw.werr != nil || rw.bw != nil || len(rw.owed) > 0 || len(rw.pending) > 0 ||
		(rw.committed && !rw.chunked) || (rw.committed && len(p) == 0) {
		return false
	}
	raw := rw.c.rawConn()
	if raw == nil {
		return false
	}
	fp := frames.Get().(*[]byte)
	defer func() {
		if cap(*fp) > maxPooledFrame {
			*fp = nil // a long event's frame is let go of, sent or not
		}
		frames.Put(fp)
	}()
	frame := (*fp)[:0]
	committing := !rw.committed
	if committing {
		if frame = rw.head(false, frame); !rw.chunked {
			return false // a declared length: Write's path
		}
	}
	if len(p) > 0 {
		frame = strconv.AppendInt(frame, int64(len(p)), 16)
		frame = append(frame, "\r\n"...)
		frame = append(frame, p...)
		frame = append(frame, "\r\n"...)
	}
	*fp = frame
	n, err := rw.c.writeNow(raw, frame)
	if err != nil || n <= 0 {
		// A deadline passed (a cut), the connection closed, or the socket
		// is full: Write and Flush, under their deadline, find out which.
		return false
	}
	if committing {
		rw.committed = true
	}
	rw.written += int64(len(p))
	if n < len(frame) {
		rw.owed = append([]byte(nil), frame[n:]...)
	}
	return true
}

// Owes is how many bytes WriteNow left that only the next Write or Flush
// sends (its frame's end: at most the piece and its chunk's framing).
func (rw *Response) Owes() int { return len(rw.owed) }

// frames are WriteNow's buffers for a chunk's frame; a long one is let go
// (maxPooledFrame).
var frames = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledFrame = 64 << 10

// nowWrite is one non-blocking write(2) for WriteNow, its function bound
// once per connection: a closure made for each write, over its result,
// cost four allocations an event.
type nowWrite struct {
	frame []byte
	n     int
	err   error
	fn    func(fd uintptr) bool
}

func (w *nowWrite) write(fd uintptr) bool {
	for {
		w.n, w.err = syscall.Write(int(fd), w.frame)
		if w.err != syscall.EINTR {
			return true // never wait for the socket: that is the writer's job
		}
	}
}

// writeNow writes frame to the socket with one system call, without
// waiting: n is what the socket took (0 when it took nothing), err a
// failure of the connection itself (closed, its deadline passed).
func (c *conn) writeNow(raw syscall.RawConn, frame []byte) (int, error) {
	w := &c.now
	if w.fn == nil {
		w.fn = w.write
	}
	w.frame = frame
	err := raw.Write(w.fn)
	n := w.n
	w.frame, w.n, w.err = nil, 0, nil
	return n, err
}
