// Package statuswriter wraps an http.ResponseWriter to remember the status
// and the body bytes sent, for logs, metrics and traces, without hiding what the wrapped writer
// can do: Flush works directly, and deadlines and Hijack through
// http.ResponseController (Unwrap).
package statuswriter

import "net/http"

// Writer is an http.ResponseWriter that remembers its status and counts
// its body bytes.
type Writer struct {
	http.ResponseWriter
	status  int
	written int64
}

// Wrap returns w wrapped.
func Wrap(w http.ResponseWriter) *Writer { return &Writer{ResponseWriter: w} }

// Status is the status sent, or 0 if nothing has been sent yet.
func (w *Writer) Status() int { return w.status }

// Written is how many body bytes the wrapped writer has taken.
func (w *Writer) Written() int64 { return w.written }

// WriteHeader sends code and remembers the first one sent.
func (w *Writer) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write sends b, which implies a 200 if no status was sent.
func (w *Writer) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

// Flush sends what is buffered, which implies a 200 if no status was sent.
// A writer that cannot flush is left as is.
func (w *Writer) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the wrapped writer.
func (w *Writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }
