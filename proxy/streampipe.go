package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/sse"
)

// The pipe between the goroutine that reads a stream from the upstream and
// the one that writes it to the client.

// errClientWrite marks a failure to write to the client.
var errClientWrite = errors.New("write to client")

// errClientStalled marks a client cut for taking no bytes while the
// upstream waited on it.
var errClientStalled = fmt.Errorf("%w: the client took no bytes for STREAM_CLIENT_STALL_S while the upstream waited on it", errClientWrite)

// errClientIdle marks a client cut for taking no bytes for
// STREAM_IDLE_TIMEOUT_S while sluice had bytes for it.
var errClientIdle = fmt.Errorf("%w: the client took no bytes for STREAM_IDLE_TIMEOUT_S", errClientWrite)

// streamPipe carries a stream's events from the goroutine that reads the
// upstream (put) to the client, holding at most max bytes between them.
// While the client keeps up, put writes them itself, with one write that
// does not wait (writeDirect, on a connection taken over). Otherwise the
// client is written by a goroutine of the pipe's own, which runs only while
// there is something to write: put starts it when the pipe goes from empty
// to not; with direct writes it ends as soon as it has written all there
// was, and without them once nothing more has come for writerLinger. An
// agent's stream is silent most of the time it is open (thinking, a tool
// call): a writer parked for the whole silence cost each open stream a
// goroutine and its stack, one started anew for each event of a burst cost
// each event a goroutine and its stack's growth, and handing each event
// over to a writer cost about a fifth more CPU per event than writing it
// from put (docs/streams.md).
type streamPipe struct {
	max    int
	shared *byteQuota    // the quota of all streams' events (streamBufferQuota)
	wake   chan struct{} // a lingering writer has something new to do; capacity 1
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
	// progress, if not nil, reports the bytes the client's TCP has
	// acknowledged (as acked, but set whatever the stall bound): while a
	// write waits on the client, each move of it renews the write's
	// deadline (see keepRenewing).
	progress func() uint64

	// What start gave the writer; written before the first writer runs,
	// and read only by the writer, one run at a time (writing), or by put
	// while no writer runs.
	w http.ResponseWriter
	// direct writes from put's goroutine, when w can (a connection taken
	// over, see takeover.go): see put.
	direct nowWriter
	rc     *http.ResponseController
	status int
	idle   time.Duration
	began  bool // the status has been sent

	mu        sync.Mutex
	buf       []byte    // events put and not yet taken by the writer
	spare     []byte    // the writer's last buffer, for buf's next turn while it runs
	started   bool      // start has run: a writer may run
	writing   bool      // a writer is running (or put is writing directly); it ends when buf has stayed empty for writerLinger
	owes      bool      // direct left bytes that only the writer's next flush sends
	owedHeld  int64     // of those, the bytes still counted in shared until that flush
	closed    bool      // nothing more will be put
	err       error     // the writer failed: the client is gone or stopped reading
	tookAt    time.Time // when the client was last seen taking bytes
	lastAcked uint64    // acked's value then

	// deadlines orders the writer's renewals of its write deadline and
	// cut, so that a renewal cannot undo a cut.
	deadlines sync.Mutex
	isCut     bool
}

func newStreamPipe(max int, shared *byteQuota) *streamPipe {
	return &streamPipe{max: max, shared: shared, wake: make(chan struct{}, 1), room: make(chan struct{}, 1), done: make(chan struct{}),
		tookAt: time.Now()}
}

// writerLinger is how long a writer that has written all there was waits
// for more before it ends: the events of a burst come a few milliseconds
// apart, a silence lasts seconds.
const writerLinger = time.Second

// nowWriter is a ResponseWriter that can send a piece of the body at once
// without waiting for the client (park.Response): WriteNow reports false
// when it cannot, having sent nothing; Owes, how many bytes of a piece it
// took were not sent, which the next Flush must send.
type nowWriter interface {
	WriteNow(p []byte) bool
	Owes() int
}

// eventBufs holds the pipes' buffers while no writer runs, so that a
// burst's first event does not allocate one and a silent stream holds
// none. A buffer grown past its size (a slow reader's megabyte) is let go
// of.
var eventBufs = sse.BytePool{Size: 4 << 10}

func getEventBuf() []byte  { return eventBufs.Get() }
func putEventBuf(b []byte) { eventBufs.Put(b) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// kick starts a writer if there is work for one (bytes to write, or the
// pipe to end) and none runs, or wakes the one lingering. Called with
// sp.mu held.
func (sp *streamPipe) kick() {
	if !sp.started || (len(sp.buf) == 0 && !sp.owes && !sp.closed && sp.err == nil) {
		return
	}
	if sp.writing {
		signal(sp.wake)
		return
	}
	sp.writing = true
	go sp.write()
}

// put adds one whole event, waiting while the pipe is full or the shared
// quota spent. An event always fits in an empty pipe, so every stream
// makes progress. It fails once the writer has failed, or when ctx ends
// while it waits. more says another event follows at once: the writer is
// started only by the last of them, so that the events of one read from
// the upstream go to the client in one write and one flush.
//
// While it waits the upstream waits on the client, and the request holds
// its slot: a client that has then taken no bytes for stall is cut, every
// byte in the pipe and the socket's buffers unread. The check runs every
// stall/4, so the slot is given back within 1.25 × stall of the later of
// the client's last byte taken and the wait's start. A client that reads
// at any pace, however slow, is never cut so: each byte it takes moves
// its acknowledged count.
func (sp *streamPipe) put(ctx context.Context, ev []byte, more bool) error {
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
		sp.kick()
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
		if sp.buf == nil {
			sp.buf = getEventBuf()
		}
		sp.buf = append(sp.buf, ev...)
		if !more && !sp.writeDirect() {
			sp.kick()
		}
	}
	sp.mu.Unlock()
	return err
}

// writeDirect writes what was put to the client from put's own goroutine,
// when no writer runs and w can send it without waiting (nowWriter): a
// client that reads keeps up, and the events go out with one system call
// and no hand-off to a writer goroutine, no timer, no deadline (CPU per
// event, docs/streams.md). It reports false, leaving the
// bytes for the writer, when the socket would make it wait (the client is
// slow, and the writer waits under its deadline and the stall bound) or
// when it cannot write directly at all. Called with sp.mu held; put is the
// only goroutine that puts, so nothing is added while it writes.
func (sp *streamPipe) writeDirect() bool {
	if sp.direct == nil || !sp.started || sp.writing || sp.owes || sp.closed || sp.err != nil || !sp.began {
		return false
	}
	take := sp.buf
	sp.writing = true // no writer starts meanwhile
	sp.mu.Unlock()
	ok := sp.direct.WriteNow(take)
	owed := 0
	if ok {
		owed = sp.direct.Owes()
	}
	sp.mu.Lock()
	sp.writing = false
	if !ok {
		return false
	}
	// What the socket did not take is still in memory (the Response's):
	// it stays counted in the streams' quota until the writer sends it.
	held := min(int64(owed), int64(len(take)))
	sp.shared.release(int64(len(take)) - held)
	putEventBuf(take)
	sp.buf = nil
	sp.tookAt = time.Now()
	if owed > 0 {
		sp.owes, sp.owedHeld = true, held
		sp.kick()
	}
	return true
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

// fail ends the stream for err: the writer stops (or one is started to
// finish, if none runs), and cut ends a write blocked on the client.
func (sp *streamPipe) fail(err error) {
	sp.mu.Lock()
	if sp.err == nil {
		sp.err = err
	}
	sp.kick()
	sp.mu.Unlock()
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
		sp.kick()
	}
	sp.mu.Unlock()
}

// close says nothing more will be put; the writer finishes what is left.
func (sp *streamPipe) close() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closed {
		return
	}
	sp.closed = true
	if sp.started && !sp.writing && len(sp.buf) == 0 && !sp.owes && sp.err == nil {
		// Everything was written directly: nothing is left for a writer.
		sp.writing = true // writing stays set: no run starts again
		close(sp.done)
		return
	}
	sp.kick()
}

// start sends status to w at once, and from then on every event put, each
// write under a deadline of idle, until the pipe is closed and empty or a
// write fails (see wait). The writer runs on goroutines of its own, one
// at a time and only while there is something to write, so start returns
// at once.
func (sp *streamPipe) start(w http.ResponseWriter, status int, idle time.Duration) {
	sp.w, sp.rc, sp.status, sp.idle = w, http.NewResponseController(w), status, idle
	if d, ok := w.(nowWriter); ok {
		sp.direct = d
		w.WriteHeader(status)
		if d.WriteNow(nil) {
			// The status is out, sent from here: no writer is needed
			// until the client falls behind (see writeDirect).
			sp.began = true
			sp.mu.Lock()
			sp.started = true
			sp.owes = d.Owes() > 0 // the headers: not counted in shared
			sp.kick()
			sp.mu.Unlock()
			return
		}
	}
	sp.mu.Lock()
	sp.started, sp.writing = true, true
	sp.mu.Unlock()
	go sp.write()
}

// wait blocks until the writer has finished: the client has every event,
// or it failed.
func (sp *streamPipe) wait() { <-sp.done }

func flushTo(rc *http.ResponseController) error {
	if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("%w: %w", errClientWrite, err)
	}
	return nil
}

// cutFor says why the client was cut, once the writer has finished:
// "client_stalled" (STREAM_CLIENT_STALL_S), "client_idle"
// (STREAM_IDLE_TIMEOUT_S), or "" when it was not cut for its reading.
func (sp *streamPipe) cutFor() string {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	switch sp.err {
	case errClientStalled:
		return "client_stalled"
	case errClientIdle:
		return "client_idle"
	}
	return ""
}
