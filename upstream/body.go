package upstream

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"
)

// ErrBodyReleased is what a read of a Body gets past what was read of it
// before it was released: the upstream answered before it had all of the
// request (a server answering early), and nothing can send the rest.
var ErrBodyReleased = errors.New("upstream: the request body was released once the upstream answered, before it was all sent")

// Body is a request body in memory whose holder can let go of its bytes
// while the call that sent it is still open. net/http keeps the request it
// sent, and with it what its GetBody would resend, until the response's
// body is closed: for a stream that is as long as the stream lasts
// (minutes, for an agent), though once the answer has come nothing sends
// the request again. Sent through Client.Do, a Body is what GetBody
// reopens, so the transport can still resend it on a pooled connection
// found dead before any answer; Release then makes the bytes unreachable
// from every reader. Its own Read is one pass from the start, for a
// Backend that reads the body once to translate it.
//
// The transport may still be reading a Body when the answer comes (its
// writer goroutine, against a server that answered early): a read after
// Release gets io.EOF at the body's end and ErrBodyReleased before it,
// never the bytes, never a panic.
type Body struct {
	data atomic.Pointer[[]byte] // nil once released
	size int
	r    bodyReader // Read's pass
	// next is released with this one: the latest body made from it
	// (see BodyFrom).
	next atomic.Pointer[Body]
}

// NewBody holds data, which must not change while the Body is in use.
func NewBody(data []byte) *Body {
	b := &Body{size: len(data)}
	b.data.Store(&data)
	b.r.b = b
	return b
}

// BodyFrom holds data, a Backend's translation of the body src it was
// given, as NewBody does; when src is a *Body, data is released with it,
// so that what a Backend sends is let go of when what it was given is.
func BodyFrom(src io.Reader, data []byte) *Body {
	b := NewBody(data)
	if s, ok := src.(*Body); ok {
		s.next.Store(b)
		if s.data.Load() == nil {
			b.Release() // released already
		}
	}
	return b
}

// Attach makes b out's body: a pass of its own, and what the transport
// reopens (GetBody) to resend it. Given a reader it knows (a
// *bytes.Reader), NewRequest would keep a snapshot of the reader for
// GetBody instead, sharing its bytes, and the transport holds it until
// the response's body is closed.
func (b *Body) Attach(out *http.Request) {
	out.ContentLength = int64(b.size)
	if b.size == 0 {
		out.Body, out.GetBody = http.NoBody, nil
		return
	}
	out.Body, out.GetBody = b.Reader(), b.reopen
}

// Len is the body's length, released or not.
func (b *Body) Len() int64 { return int64(b.size) }

// Read reads the body's one pass (see Reader for another).
func (b *Body) Read(p []byte) (int, error) { return b.r.Read(p) }

// Reader is a new pass over the body from its start.
func (b *Body) Reader() io.ReadCloser { return &bodyReader{b: b} }

// Release lets go of the bytes: from here on only their length is kept.
// It is safe to call more than once, and concurrently with reads.
func (b *Body) Release() {
	b.data.Store(nil)
	if n := b.next.Load(); n != nil {
		n.Release()
	}
}

// reopen is the request's GetBody: a new pass, or ErrBodyReleased once
// there is nothing to send (the transport never resends after an
// answer; this is for a caller that would).
func (b *Body) reopen() (io.ReadCloser, error) {
	if b.data.Load() == nil && b.size > 0 {
		return nil, ErrBodyReleased
	}
	return b.Reader(), nil
}

// bodyReader is one pass over a Body. A pass is read by one goroutine at
// a time (as any io.Reader); only its Body's bytes are shared.
type bodyReader struct {
	b   *Body
	off int
}

func (r *bodyReader) Read(p []byte) (int, error) {
	if r.off >= r.b.size {
		return 0, io.EOF
	}
	data := r.b.data.Load()
	if data == nil {
		return 0, ErrBodyReleased
	}
	n := copy(p, (*data)[r.off:])
	r.off += n
	return n, nil
}

func (r *bodyReader) Close() error { return nil }
