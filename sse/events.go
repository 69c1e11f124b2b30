package sse

import (
	"bytes"
	"errors"
	"io"
)

// MaxEventSize bounds one upstream SSE event. The API's largest events (a
// tool call's whole input in one delta, a long thinking signature) are
// far smaller; an event past it means an upstream gone wrong, and sluice
// would otherwise buffer it without limit.
const MaxEventSize = 8 << 20

var (
	MessageStart = []byte("event: message_start")
	MessageDelta = []byte("event: message_delta")
	// ContentBlockDelta opens an event that carries the answer's
	// tokens: the first one is the stream's first token.
	ContentBlockDelta = []byte("event: content_block_delta")
	// Ping opens a keep-alive event, which carries nothing.
	Ping = []byte("event: ping")
	// MessageStop and ErrorEvent open the events that end a stream.
	MessageStop = []byte("event: message_stop")
	ErrorEvent  = []byte("event: error")
	DataPrefix  = []byte("data:")
)

// ErrEventTooLarge marks an upstream event longer than MaxEventSize.
var ErrEventTooLarge = errors.New("upstream event too large")

// Copy copies SSE events from src to send, one complete event (lines
// up to a blank line) per call; more says that another complete event has
// already been read and follows at once, so that the events that arrived
// together can be written to the client together (one write, one flush),
// while one that came alone is never held back waiting for the next.
// progress is called after each read that completed a line, with the
// event being read then (that line included); an event that a read
// completed goes to send instead. At EOF a trailing partial event is sent
// as is. It returns nil at EOF, send's error, ErrEventTooLarge for an
// event past MaxEventSize, or src's read error.
//
// It reads everything src has at once, into a buffer taken from a pool
// while there are bytes to hold: an agent's stream is silent most of the
// time it is open (thinking, a tool call), and it waits for the next
// event through a one-byte read, holding no buffer; the rest of what came
// is then read in one go. A buffer of its own sized for a silence (1 KB)
// split a burst into reads of a few events each, and a write to the client
// for each read (docs/streams.md).
func Copy(send func(ev []byte, more bool) error, src io.Reader, progress func(event []byte)) error {
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
			if len(buf) > MaxEventSize {
				return ErrEventTooLarge
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
// past MaxEventSize is ErrEventTooLarge. from is where to look for lines:
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
		tooLarge := at-start > MaxEventSize
		if pending != nil {
			if err := send(pending, !tooLarge); err != nil {
				return 0, err
			}
		}
		if tooLarge {
			return 0, ErrEventTooLarge
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
	case len(rest) > MaxEventSize:
		return 0, ErrEventTooLarge
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

// relayBufs are Copy' read buffers, held only while a stream has
// bytes to hold; a buffer grown for a long event is not pooled. Each is
// relayReadSize: a burst of an answer's events, and most single events,
// in one read.
var relayBufs = BytePool{Size: 16 << 10}

func getRelayBuf() []byte  { return relayBufs.Get() }
func putRelayBuf(b []byte) { relayBufs.Put(b) }

// growRelayBuf makes room after buf's bytes for a long event.
func growRelayBuf(buf []byte) []byte {
	grown := make([]byte, len(buf), 2*cap(buf))
	copy(grown, buf)
	putRelayBuf(buf)
	return grown
}
