// Package logbuf holds log lines for a moment and writes them to their
// destination together. sluice writes an access line for every request:
// written as it came, each line cost a system call, 3 % of the CPU sluice
// spent on short requests (docs/streams.md). Held for up to the Writer's
// delay, or until MaxHeld bytes wait, the lines of many requests go out in
// one write, as a web server's buffered access log does: a line is late by
// at most the delay, and a crash loses at most what waited then (the
// runtime writes its own crash report straight to the file).
package logbuf

import (
	"io"
	"sync"
	"time"
)

// MaxHeld is how many bytes wait at most: past it a Write writes them
// all at once, on the writer's goroutine.
const MaxHeld = 64 << 10

// Writer is an io.Writer that holds what is written for up to its delay.
// It is safe for concurrent use; the order of writes is kept.
type Writer struct {
	dst   io.Writer
	delay time.Duration

	out sync.Mutex // held while writing to dst: one write at a time, in order

	mu     sync.Mutex
	held   []byte
	spare  []byte
	armed  bool // the timer will flush what is held
	closed bool // Close ran: writes go straight to dst
	timer  *time.Timer
}

// New returns a Writer that writes to dst what has waited delay.
func New(dst io.Writer, delay time.Duration) *Writer {
	w := &Writer{dst: dst, delay: delay}
	w.timer = time.AfterFunc(time.Hour, func() { w.Flush() })
	w.timer.Stop()
	return w
}

// Write holds p, and reports it written whole: an error writing it to
// dst comes later, and is Flush's. Once the Writer is closed it writes p
// at once.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		w.out.Lock()
		defer w.out.Unlock()
		return w.dst.Write(p)
	}
	w.held = append(w.held, p...)
	full := len(w.held) >= MaxHeld
	if !full && !w.armed {
		w.armed = true
		w.timer.Reset(w.delay)
	}
	w.mu.Unlock()
	if full {
		w.Flush()
	}
	return len(p), nil
}

// Flush writes what is held to dst now.
func (w *Writer) Flush() error {
	w.out.Lock()
	defer w.out.Unlock()
	return w.flushOut(false)
}

// Close writes what is held, and from then on writes go to dst at once.
// It does not close dst. A line written while it runs goes after those
// held: the switch to writing at once is made while dst is being written.
func (w *Writer) Close() error {
	w.timer.Stop()
	w.out.Lock()
	defer w.out.Unlock()
	return w.flushOut(true)
}

// flushOut writes what is held to dst, with w.out held; closing, it makes
// later writes go straight to dst.
func (w *Writer) flushOut(closing bool) error {
	w.mu.Lock()
	b := w.held
	w.held, w.spare = w.spare[:0], nil
	w.armed = false
	if closing {
		w.closed = true
	}
	w.mu.Unlock()
	if len(b) == 0 {
		return nil
	}
	_, err := w.dst.Write(b)
	w.mu.Lock()
	if cap(b) <= MaxHeld*2 { // a burst's larger buffer is let go of
		w.spare = b[:0]
	}
	w.mu.Unlock()
	return err
}
