package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// The pipe's writer: the goroutine that writes what was put to the client,
// each piece under a write deadline renewed while the client takes bytes.

// write is one run of the writer: it sends the status if no run has, then
// what was put, until nothing more has come for writerLinger. It ends the
// pipe (done) once the pipe is closed and empty, or when a write fails; it
// then leaves writing set, so that no other run starts.
func (sp *streamPipe) write() {
	var err error
	if !sp.began {
		sp.began = true
		sp.w.WriteHeader(sp.status)
		err = flushTo(sp.rc)
	}
	var linger *time.Timer
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
	for err == nil {
		sp.mu.Lock()
		for len(sp.buf) == 0 && !sp.owes && !sp.closed && sp.err == nil {
			if sp.direct != nil {
				// put writes directly again from here: a writer waiting
				// for more would only take the events from it.
				sp.endRun()
				return
			}
			sp.mu.Unlock()
			if linger == nil {
				linger = time.NewTimer(writerLinger)
			} else {
				linger.Reset(writerLinger)
			}
			select {
			case <-sp.wake:
				sp.mu.Lock()
				continue
			case <-linger.C:
			}
			sp.mu.Lock()
			if len(sp.buf) == 0 && !sp.owes && !sp.closed && sp.err == nil {
				// Silent: nothing is held through the silence; the next
				// put starts a writer again.
				sp.endRun()
				return
			}
		}
		if sp.err != nil { // cut
			err = sp.err
			sp.mu.Unlock()
			break
		}
		if len(sp.buf) == 0 && !sp.owes { // closed, and all written
			putEventBuf(sp.spare)
			sp.buf, sp.spare = nil, nil
			sp.mu.Unlock() // writing stays set: no run starts again
			close(sp.done)
			return
		}
		take := sp.buf
		sp.buf, sp.spare = sp.spare, nil
		owedHeld := sp.owedHeld
		sp.owes, sp.owedHeld = false, 0 // the flush below sends what direct left
		sp.mu.Unlock()
		signal(sp.room)
		stop, bound := sp.keepRenewing()
		if len(take) == 0 && !sp.renew(sp.rc, bound) {
			err = errClientStalled
		} else if werr := writeRenewingWhile(sp.w, sp.rc, take, bound, sp.renew); werr != nil {
			err = clientWriteError(werr)
		} else if ferr := flushTo(sp.rc); ferr != nil {
			err = clientWriteError(ferr)
		}
		stop()
		sp.shared.release(int64(len(take)) + owedHeld)
		sp.mu.Lock()
		sp.spare = take[:0]
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
	sp.shared.release(int64(len(sp.buf)) + sp.owedHeld)
	sp.buf, sp.spare, sp.owedHeld = nil, nil, 0 // not pooled: a cut write may still hold one
	sp.mu.Unlock()
	signal(sp.room)
	close(sp.done)
}

// clientWriteError is the error of a failed write to the client: a
// deadline that passed is errClientIdle (the client took nothing for
// idle), anything else the client gone.
func clientWriteError(err error) error {
	switch {
	case errors.Is(err, errClientWrite) && !errors.Is(err, os.ErrDeadlineExceeded):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errClientIdle
	}
	return fmt.Errorf("%w: %v", errClientWrite, err)
}

// keepRenewing renews the deadline of the writer's write for as long as
// the client takes bytes, until stop is called: each check (every idle/4)
// that finds the client's acknowledged count moved pushes the deadline to
// 1.25 × idle from then, so that a move just before the deadline is seen
// by a check before it. So a write waits on a client that reads, however
// slowly, and is cut only when the client has taken nothing for between
// idle and 1.25 × idle (TCP acknowledges what the client reads a window
// update at a time: see docs/streams.md for the slowest reader that is
// not cut). Without a probe (not TCP), each piece of a write has its own
// deadline of idle, as writeRenewingWhile sets.
//
// bound is the deadline each piece of the write starts with. The socket is
// first asked at the first check, not before the write: most writes end
// long before it, and cost no system call for it (docs/streams.md).
func (sp *streamPipe) keepRenewing() (stop func(), bound time.Duration) {
	if sp.progress == nil || sp.idle <= 0 {
		return func() {}, sp.idle
	}
	bound = sp.idle + sp.idle/4
	var mu sync.Mutex
	stopped, asked := false, false
	var last uint64
	var t *time.Timer
	mu.Lock() // t is set before its function can read it
	defer mu.Unlock()
	t = time.AfterFunc(sp.idle/4, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if now := sp.progress(); !asked {
			asked, last = true, now
		} else if now != last {
			last = now
			sp.renew(sp.rc, bound)
		}
		t.Reset(sp.idle / 4)
	})
	return func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		t.Stop()
	}, bound
}

// endRun ends a writer's run with nothing left to write: its buffers go
// back to the pool, and the next put writes or starts a run again. Called
// with sp.mu held; it unlocks it.
func (sp *streamPipe) endRun() {
	putEventBuf(sp.buf)
	putEventBuf(sp.spare)
	sp.buf, sp.spare = nil, nil
	sp.writing = false
	sp.mu.Unlock()
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
