package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/apierror"
)

// bodyReadTimeout bounds how long a request body may take to arrive: 32 MB
// at well under 1 MB/s. A Message Batches create (up to 256 MB) gets
// batchBodyReadTimeout.
const (
	bodyReadTimeout      = 60 * time.Second
	batchBodyReadTimeout = 5 * time.Minute
)

// byteQuota bounds the bytes of one kind that sluice holds at once (a
// quota, so that "budget" in sluice means only what may be spent): the
// bodies of Messages requests (BODY_BUDGET_MB: a waiting request keeps its
// body, which its retries resend, so without a bound the memory for bodies
// is BATCH_MAX_QUEUE times the 32 MB body limit), and the stream events
// held for slow readers (streamBufferQuota).
type byteQuota struct {
	limit int64
	held  atomic.Int64
	drain func() time.Duration // when the bodies held now will have gone: a refusal's retry-after; nil: none known
}

// reserve takes n bytes of the quota, or reports false and takes nothing.
func (b *byteQuota) reserve(n int64) bool {
	if n <= 0 {
		return true
	}
	for {
		old := b.held.Load()
		if old+n > b.limit {
			return false
		}
		if b.held.CompareAndSwap(old, old+n) {
			return true
		}
	}
}

// release gives n bytes back.
func (b *byteQuota) release(n int64) {
	if n > 0 {
		b.held.Add(-n)
	}
}

// Held reports the bytes of request bodies held now.
func (b *byteQuota) Held() int64 { return b.held.Load() }

// errBodyQuota answers a request whose body would not fit in BODY_BUDGET_MB:
// back-pressure, retried once the bodies waiting now have gone upstream.
func errBodyQuota(b *byteQuota) *apierror.Error {
	var wait time.Duration
	if b.drain != nil {
		wait = b.drain()
	}
	return backPressure(wait, fmt.Sprintf("sluice is holding back this request: the request bodies it holds would exceed BODY_BUDGET_MB=%d; retry after the retry-after delay", b.limit>>20))
}

// errClientGone marks a client that left while its body was being read.
var errClientGone = &apierror.Error{Status: 499, Type: "client_closed", Message: "client closed the request"}

// heldBody is a request body in memory and its share of the quota.
type heldBody struct {
	data     []byte
	reserved int64
}

// bodyChunk is the unit in which a body of unknown length is read and
// reserved: memory is committed as bytes arrive, never as a header
// promises them.
const bodyChunk = 64 << 10

// readBody reads r's whole body, up to limit bytes, within timeout, into a
// buffer of exactly its size, holding its size in quota (the caller gives
// it back when it is done with the body). Every way the read can fail gets
// an answer: 413 past limit, 429 past the quota (BODY_BUDGET_MB), 408 when the body does
// not arrive in time, 400 when it cannot be read; after any of them the
// connection is closed, since what is left of the body on it cannot be
// told from a next request. errClientGone means nobody is left to answer.
//
// A declared length that does not fit in what is left of the quota is
// refused before anything is read. But the quota is taken only as bytes
// arrive, never for what a header promises: otherwise eight clients that
// declare 32 MB and send one byte would hold the whole quota for the
// body timeout, and refuse everyone else.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration, quota *byteQuota) (heldBody, *apierror.Error) {
	if r.ContentLength > limit {
		return heldBody{}, closing(w, errTooLarge(limit))
	}
	if r.ContentLength > quota.limit-quota.Held() {
		return heldBody{}, closing(w, errBodyQuota(quota))
	}
	var hb heldBody
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(timeout))
	data, err := readAllOf(http.MaxBytesReader(w, r.Body, limit), r.ContentLength, quota, &hb.reserved)
	if err != nil {
		quota.release(hb.reserved)
		// The read deadline stays in force: Go's server discards an unread
		// remainder after the handler, and must not wait for it forever.
		return heldBody{}, closing(w, bodyReadError(r, err, limit, timeout, quota))
	}
	// The deadline is lifted only after a whole body, so that the server's
	// watch for a departing client is not cut short during a long stream.
	_ = rc.SetReadDeadline(time.Time{})
	hb.data = data
	if bodyReadHook != nil {
		bodyReadHook(data)
	}
	return hb, nil
}

// bodyReadHook, set by a test, sees each request body read whole: the
// tests of letGoOfBody watch its bytes being collected.
var bodyReadHook func(data []byte)

// errQuotaSpent is readAllOf's failure when a body of unknown length
// outgrows the quota.
var errQuotaSpent = errors.New("bodies' quota (BODY_BUDGET_MB) spent")

// bodyReadError maps a failed body read to its answer.
func bodyReadError(r *http.Request, err error, limit int64, timeout time.Duration, quota *byteQuota) *apierror.Error {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return errTooLarge(limit)
	case errors.Is(err, errQuotaSpent):
		return errBodyQuota(quota)
	// Before the context: the server cancels the request's context when
	// its read hits the deadline, which is not the client leaving.
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errBodyTimeout(timeout)
	case r.Context().Err() != nil:
		return errClientGone
	}
	return &apierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
		Message: "sluice could not read the request body (" + err.Error() + "); send a well-formed HTTP body"}
}

func errBodyTimeout(timeout time.Duration) *apierror.Error {
	return &apierror.Error{Status: http.StatusRequestTimeout, Type: "invalid_request_error",
		Message: fmt.Sprintf("the request body did not arrive within %s; send it faster or make it smaller", timeout)}
}

// closing marks the response to e as the connection's last.
func closing(w http.ResponseWriter, e *apierror.Error) *apierror.Error {
	if e != errClientGone {
		w.Header().Set("Connection", "close")
	}
	return e
}

// readAllOf reads rd to the end into a buffer of exactly the body's size,
// taking each chunk of the quota before it reads into it (reserved counts
// what it took). A body of declared length is read into a buffer grown as
// bytes arrive up to exactly that length; a body of unknown length is read
// in chunks and copied once into its exact buffer at the end.
func readAllOf(rd io.Reader, declared int64, quota *byteQuota, reserved *int64) ([]byte, error) {
	grow := func(n int64) error {
		if !quota.reserve(n) {
			return errQuotaSpent
		}
		*reserved += n
		return nil
	}
	if declared >= 0 {
		first := min(declared, bodyChunk)
		if err := grow(first); err != nil {
			return nil, err
		}
		body := make([]byte, 0, first)
		// Up to 64 KB the buffer is the body's exact size at once; beyond,
		// it doubles only as bytes arrive, so a client that declares 32 MB
		// and sends one byte costs one chunk, not 32 MB.
		for int64(len(body)) < declared {
			if len(body) == cap(body) {
				next := min(declared, 2*int64(cap(body)))
				if err := grow(next - int64(cap(body))); err != nil {
					return nil, err
				}
				grown := make([]byte, len(body), next)
				copy(grown, body)
				body = grown
			}
			n, err := rd.Read(body[len(body):cap(body)])
			body = body[:len(body)+n]
			if err == io.EOF && int64(len(body)) < declared {
				return nil, io.ErrUnexpectedEOF
			}
			if err != nil && err != io.EOF {
				return nil, err
			}
		}
		return body, nil
	}
	var chunks [][]byte
	total := 0
	for {
		if err := grow(bodyChunk); err != nil {
			return nil, err
		}
		chunk := make([]byte, bodyChunk)
		n, err := io.ReadFull(rd, chunk)
		chunks = append(chunks, chunk[:n])
		total += n
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	body := make([]byte, 0, total)
	for _, c := range chunks {
		body = append(body, c...)
	}
	quota.release(*reserved - int64(total))
	*reserved = int64(total)
	return body, nil
}

// errTooManyPending answers a request whose body would be one too many
// still arriving.
var errTooManyPending = backPressure(time.Second,
	"sluice is holding back this request: it has MAX_PENDING_CONNS connections and request bodies still arriving; retry after the retry-after delay")

// pendingCount counts connections and bodies that have not yet arrived
// whole (see pendingConns).
type pendingCount struct{ n atomic.Int64 }

// take counts one more unless max are counted already (max 0: no bound).
func (c *pendingCount) take(max int) bool {
	if n := c.n.Add(1); max > 0 && n > int64(max) {
		c.n.Add(-1)
		return false
	}
	return true
}

func (c *pendingCount) give() { c.n.Add(-1) }

// takeBody reads r's body as a Messages body is read, whatever endpoint it
// is for: counted against MAX_PENDING_CONNS while it arrives, within the
// body timeout, under the bodies' quota as bytes come. When the body cannot
// be had it answers the client itself (429, 408, 413, ...; nothing to a
// client that is gone) and reports false; otherwise the caller releases
// the body's reservation from p.bodies.
func (p *Proxy) takeBody(w http.ResponseWriter, r *http.Request) (heldBody, bool) {
	if !p.pendingConns.take(p.cfg.MaxPendingConns) {
		p.metrics.Shed.Inc()
		apierror.WriteSluice(w, closing(w, errTooManyPending))
		return heldBody{}, false
	}
	body, aerr := readBody(w, r, maxMessagesBody, p.bodyTimeout, p.bodies)
	p.pendingConns.give()
	if aerr != nil {
		if aerr.Type == "rate_limit_error" {
			p.metrics.Shed.Inc()
		}
		if aerr != errClientGone {
			apierror.WriteSluice(w, aerr)
		}
		return heldBody{}, false
	}
	return body, true
}
