// Package window groups items that arrive together. A window opens with its
// first item and closes when it holds MaxSize items, when its items' bytes
// reach MaxBytes (if set), or MaxWait after that first item arrived,
// whichever comes first; the closed window is a Wave, handed to a flush
// function in the order the waves closed. It serves both the realtime
// path (windows of a few requests, milliseconds long) and the bulk path
// (up to 100,000 items and minutes): nothing is allocated for the maximum
// size up front, and withdrawing an item is O(1) in a large window.
package window

import (
	"errors"
	"sync"
	"time"
)

// Reason says why a window closed.
type Reason uint8

const (
	ReasonSize  Reason = iota + 1 // it reached MaxSize items
	ReasonAge                     // MaxWait passed since its first item
	ReasonFlush                   // Flush or Close was called (shutdown)
	ReasonIdle                    // FlushEarly: its owner saw nothing to wait for
	ReasonBytes                   // the next item would pass MaxBytes, or it reached it
)

func (r Reason) String() string {
	switch r {
	case ReasonSize:
		return "size"
	case ReasonAge:
		return "age"
	case ReasonFlush:
		return "flush"
	case ReasonIdle:
		return "idle"
	case ReasonBytes:
		return "bytes"
	}
	return "unknown"
}

// ErrClosed is returned by Add once the window has been closed.
var ErrClosed = errors.New("window: closed")

// Wave is a closed window: the items that arrived together.
type Wave[T comparable] struct {
	ID       uint64    // 1, 2, 3... in the order waves opened
	Items    []T       // in arrival order; the flush function may reorder them
	Reason   Reason    // why the window closed
	OpenedAt time.Time // when the first item arrived
	ClosedAt time.Time // when the window closed
	Bytes    int64     // the sizes AddSized gave its items, summed

	done chan struct{}
	live int // items not withdrawn
	// index, gone and sizes are kept once a wave passes indexFrom items,
	// so that Withdraw is O(1): index finds an item's place, gone marks
	// the withdrawn places until the wave closes and is compacted. sizes
	// holds each item's bytes (when MaxBytes is set).
	index map[T]int
	gone  []bool
	sizes []int64
}

// indexFrom is the number of items from which a wave indexes them. Below
// it a linear scan is cheaper than a map, and the realtime path's windows
// of 16 never pay for one.
const indexFrom = 64

// Done is closed once the flush function has returned for this wave, so an
// item's owner can wait for its wave to be dispatched.
func (w *Wave[T]) Done() <-chan struct{} { return w.done }

// Part is a wave of some of w's items, for a flush function that hands
// them on in parts (a chain of releasers, say): it has w's ID, reason and
// times, but not its Bytes, and its Done is never closed.
func (w *Wave[T]) Part(items []T) *Wave[T] {
	return &Wave[T]{ID: w.ID, Items: items, Reason: w.Reason, OpenedAt: w.OpenedAt, ClosedAt: w.ClosedAt}
}

// Window collects items into waves. Its zero value is not usable; call New.
type Window[T comparable] struct {
	maxSize  int
	maxBytes int64 // 0: no byte threshold
	maxWait  time.Duration
	flush    func(*Wave[T])

	mu       sync.Mutex
	open     *Wave[T]
	timer    *time.Timer
	nextID   uint64
	closed   bool
	draining bool // every Add closes its window at once (shutdown)

	// flushMu is taken before mu is let go when a wave closes, so that waves
	// reach the flush function in the order they closed even when a timer
	// and a full window race.
	flushMu sync.Mutex
}

// New returns a window that closes at maxSize items or maxWait after the
// first, and calls flush with each closed wave. flush runs on the goroutine
// that closed the window (an Add or a timer); it must not block for long and
// must not call Add.
func New[T comparable](maxSize int, maxWait time.Duration, flush func(*Wave[T])) (*Window[T], error) {
	if maxSize < 1 {
		return nil, errors.New("window: max size must be at least 1")
	}
	if maxWait < 0 {
		return nil, errors.New("window: max wait must not be negative")
	}
	if flush == nil {
		return nil, errors.New("window: flush function is nil")
	}
	return &Window[T]{maxSize: maxSize, maxWait: maxWait, flush: flush}, nil
}

// SetMaxBytes makes a window close on bytes too: an item given to AddSized
// that would take the open window past n bytes closes it first (and joins
// the next), and a window that reaches n closes at once. Call it before
// the first Add; n <= 0 turns the threshold off.
func (w *Window[T]) SetMaxBytes(n int64) {
	w.mu.Lock()
	w.maxBytes = max(n, 0)
	w.mu.Unlock()
}

// Add puts item in the open window, opening one if needed, and returns the
// wave it joined. If item fills the window, the wave is flushed before Add
// returns.
func (w *Window[T]) Add(item T) (*Wave[T], error) { return w.AddSized(item, 0) }

// AddSized is Add for an item of n bytes, counted against SetMaxBytes. An
// item larger than the threshold alone still goes, in a wave of its own.
func (w *Window[T]) AddSized(item T, n int64) (*Wave[T], error) {
	w.mu.Lock()
	for w.maxBytes > 0 && w.open != nil && w.open.Bytes+n > w.maxBytes {
		w.closeLocked(ReasonBytes) // releases mu
		w.mu.Lock()
	}
	if w.closed {
		w.mu.Unlock()
		return nil, ErrClosed
	}
	wave := w.open
	if wave == nil {
		w.nextID++
		wave = &Wave[T]{
			ID:       w.nextID,
			Items:    make([]T, 0, min(w.maxSize, indexFrom)),
			OpenedAt: time.Now(),
			done:     make(chan struct{}),
		}
		w.open = wave
		if w.maxSize > 1 && !w.draining {
			w.timer = time.AfterFunc(w.maxWait, func() { w.expire(wave) })
		}
	}
	wave.add(item, n, w.maxBytes > 0)
	if wave.live >= w.maxSize {
		w.closeLocked(ReasonSize)
		return wave, nil
	}
	if w.maxBytes > 0 && wave.Bytes >= w.maxBytes {
		w.closeLocked(ReasonBytes)
		return wave, nil
	}
	if w.draining {
		w.closeLocked(ReasonFlush)
		return wave, nil
	}
	w.mu.Unlock()
	return wave, nil
}

// Withdraw takes item out of the open window if it is still there, so that a
// departed item never reaches the flush function. It reports whether it did;
// false means the item's wave has already closed.
func (w *Window[T]) Withdraw(item T) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	wave := w.open
	if wave == nil || !wave.withdraw(item) {
		return false
	}
	if wave.live == 0 {
		// Nobody is left to wait for this wave: drop it unflushed.
		w.open = nil
		w.stopTimer()
	}
	return true
}

// add appends item of n bytes; sized says whether sizes are kept.
func (wv *Wave[T]) add(item T, n int64, sized bool) {
	wv.Items = append(wv.Items, item)
	wv.live++
	wv.Bytes += n
	if sized {
		wv.sizes = append(wv.sizes, n)
	}
	switch {
	case wv.index != nil:
		wv.index[item] = len(wv.Items) - 1
		wv.gone = append(wv.gone, false)
	case len(wv.Items) == indexFrom:
		wv.index = make(map[T]int, 2*indexFrom)
		for i, it := range wv.Items {
			wv.index[it] = i
		}
		wv.gone = make([]bool, len(wv.Items), 2*indexFrom)
	}
}

// withdraw takes item out of an open wave, in O(1) once it is indexed.
func (wv *Wave[T]) withdraw(item T) bool {
	if wv.index != nil {
		i, ok := wv.index[item]
		if !ok {
			return false
		}
		delete(wv.index, item)
		wv.gone[i] = true
		wv.live--
		if wv.sizes != nil {
			wv.Bytes -= wv.sizes[i]
		}
		return true
	}
	for i, it := range wv.Items {
		if it != item {
			continue
		}
		wv.Items = append(wv.Items[:i], wv.Items[i+1:]...)
		if wv.sizes != nil {
			wv.Bytes -= wv.sizes[i]
			wv.sizes = append(wv.sizes[:i], wv.sizes[i+1:]...)
		}
		wv.live--
		return true
	}
	return false
}

// seal compacts the withdrawn places out of Items and drops the index, as
// the wave closes.
func (wv *Wave[T]) seal() {
	if wv.live < len(wv.Items) {
		kept := wv.Items[:0]
		for i, it := range wv.Items {
			if !wv.gone[i] {
				kept = append(kept, it)
			}
		}
		clear(wv.Items[len(kept):]) // let withdrawn items be collected
		wv.Items = kept
	}
	wv.index, wv.gone, wv.sizes = nil, nil, nil
}

// Flush closes the open window now, if there is one.
func (w *Window[T]) Flush() {
	w.mu.Lock()
	if w.open == nil {
		w.mu.Unlock()
		return
	}
	w.closeLocked(ReasonFlush)
}

// FlushEarly closes the open window now, with ReasonIdle, if it is still
// wave, and reports whether it did: MaxWait is then a maximum wait, not a
// fixed one. Its owner calls it on the wave an Add returned once it knows
// that waiting longer would gain nothing; a wave that has closed meanwhile
// (on size, on age, or by another FlushEarly) is left alone, and so is a
// newer window opened since.
func (w *Window[T]) FlushEarly(wave *Wave[T]) bool {
	w.mu.Lock()
	if w.open == nil || w.open != wave {
		w.mu.Unlock()
		return false
	}
	w.closeLocked(ReasonIdle)
	return true
}

// Drain flushes the open window now and makes every later Add close its
// window at once: when a server shuts down, a request accepted just before
// the signal must not wait out MaxWait.
func (w *Window[T]) Drain() {
	w.mu.Lock()
	w.draining = true
	if w.open == nil {
		w.mu.Unlock()
		return
	}
	w.closeLocked(ReasonFlush)
}

// Close flushes the open window and makes later Adds fail with ErrClosed.
func (w *Window[T]) Close() {
	w.mu.Lock()
	w.closed = true
	if w.open == nil {
		w.mu.Unlock()
		return
	}
	w.closeLocked(ReasonFlush)
}

// Pending reports how many items are in the open window.
func (w *Window[T]) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open == nil {
		return 0
	}
	return w.open.live
}

func (w *Window[T]) expire(wave *Wave[T]) {
	w.mu.Lock()
	if w.open != wave {
		w.mu.Unlock()
		return
	}
	w.closeLocked(ReasonAge)
}

// closeLocked closes the open wave and flushes it. It is called with w.mu
// held and returns with it released.
func (w *Window[T]) closeLocked(reason Reason) {
	wave := w.open
	w.open = nil
	w.stopTimer()
	wave.Reason = reason
	wave.ClosedAt = time.Now()
	wave.seal()
	w.flushMu.Lock()
	w.mu.Unlock()
	defer w.flushMu.Unlock()
	defer close(wave.done)
	w.flush(wave)
}

func (w *Window[T]) stopTimer() {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}
