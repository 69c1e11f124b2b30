package bench

import (
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/term"
)

// progress writes a run's progress. On a terminal it is one line rewritten
// in place (\r) five times a second; anywhere else (a file, a pipe, a CI
// log) \r-updates pile up into one endless line, so it is a plain line
// every few seconds instead.
type progress struct {
	w     io.Writer
	live  bool
	every time.Duration
	last  time.Time
}

// newProgress writes to w, or nowhere if w is nil; every is the plain
// lines' period (zero: 5s).
func newProgress(w io.Writer, every time.Duration, start time.Time) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, live: isTerminal(w), every: every, last: start}
	if p.live {
		p.every = 200 * time.Millisecond
	} else if p.every <= 0 {
		p.every = 5 * time.Second
	}
	return p
}

// isTerminal reports whether w is a terminal. A character device is not
// enough: /dev/null is one too.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// update shows line if its period has passed since the last one.
func (p *progress) update(now time.Time, line string) {
	if p == nil || now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	if p.live {
		fmt.Fprintf(p.w, "\r%s   ", line)
		return
	}
	fmt.Fprintln(p.w, line)
}

// done ends the mode's progress with its final line.
func (p *progress) done(line string) {
	if p == nil {
		return
	}
	if p.live {
		// Padded to wipe the longer running line it overwrites.
		fmt.Fprintf(p.w, "\r%s%s\n", line, strings.Repeat(" ", 40))
		return
	}
	fmt.Fprintln(p.w, line)
}
