package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/upstream"
)

// relayEvents relays an SSE response event by event, flushing each complete
// event as it arrives. Only whole events are written, so that an error
// sluice adds in-band always lands on an event boundary where the SDKs'
// parsers can read it. A stream that stays silent for the idle timeout is
// ended with an in-band timeout_error; cancel aborts the upstream call.
func (p *Proxy) relayEvents(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, resp *http.Response) error {
	h := w.Header()
	upstream.CopyHeader(h, resp.Header)
	h.Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	idle := p.cfg.StreamIdleTimeout
	var tally streamUsage
	ew := &eventWriter{w: w, rc: rc, idle: idle, observe: tally.observe}
	defer func() {
		if tally.seen {
			p.countTokens(tally.model, tally.u)
		}
	}()
	if err := ew.flush(); err != nil {
		return err
	}

	var stalled atomic.Bool
	watchdog := time.AfterFunc(idle, func() {
		stalled.Store(true)
		cancel()
	})
	defer watchdog.Stop()

	err := copyEvents(ew, resp.Body, func() { watchdog.Reset(idle) })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errClientWrite):
		cancel() // the client is gone or stopped reading: stop the upstream too
		return err
	case stalled.Load():
		ew.writeEvent(sseError("timeout_error", fmt.Sprintf(
			"the upstream sent nothing for STREAM_IDLE_TIMEOUT_S=%s, so sluice ended the stream; retry the request", idle)))
		return fmt.Errorf("stream idle for %s", idle)
	case ctx.Err() != nil:
		return ctx.Err() // the client left
	default:
		ew.writeEvent(sseError("api_error", fmt.Sprintf(
			"the upstream stream broke before it ended (%v); retry the request", err)))
		return err
	}
}

// errClientWrite marks a failure to write to the client.
var errClientWrite = errors.New("write to client")

// eventWriter writes whole events to the client, each under a write
// deadline so that a client that stops reading cannot hold a slot forever.
type eventWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	idle time.Duration
	// observe, if set, sees each complete upstream event before it is
	// written (for token usage); it must not keep ev.
	observe func(ev []byte)
}

func (ew *eventWriter) writeEvent(ev []byte) error {
	// Not every ResponseWriter supports deadlines (a recorder in tests);
	// where it does not, the write simply has none.
	_ = ew.rc.SetWriteDeadline(time.Now().Add(ew.idle))
	if _, err := ew.w.Write(ev); err != nil {
		return fmt.Errorf("%w: %v", errClientWrite, err)
	}
	return ew.flush()
}

func (ew *eventWriter) flush() error {
	if err := ew.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return fmt.Errorf("%w: %v", errClientWrite, err)
	}
	return nil
}

// copyEvents copies SSE events from src to ew, one complete event (lines up
// to a blank line) per write. progress is called whenever a line arrives.
// At EOF a trailing partial event is written as is. It returns nil at EOF,
// an errClientWrite error if the client failed, or src's read error.
func copyEvents(ew *eventWriter, src io.Reader, progress func()) error {
	br := bufio.NewReaderSize(src, 16<<10)
	var event []byte
	lineStart := 0 // where the line being read began in event
	for {
		chunk, err := br.ReadSlice('\n')
		event = append(event, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue // a long line: keep reading it
		case err == io.EOF:
			if len(event) > 0 {
				return ew.writeEvent(event)
			}
			return nil
		case err != nil:
			return err
		}
		progress()
		// The whole line, not the last chunk of it: a long line can end with
		// a chunk of just "\n" when it fills the buffer exactly.
		line := event[lineStart:]
		lineStart = len(event)
		if len(line) == 1 || (len(line) == 2 && line[0] == '\r') {
			// A blank line ends the event.
			if ew.observe != nil {
				ew.observe(event)
			}
			if err := ew.writeEvent(event); err != nil {
				return err
			}
			event = event[:0]
			lineStart = 0
		}
	}
}
