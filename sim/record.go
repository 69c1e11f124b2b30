package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// MaxRecorded bounds how many requests one recording holds, so that a
// simulator left running with RecordDir set cannot fill a disk.
const MaxRecorded = 1000

// RecordedRequest is the head of one request the simulator recorded: the
// file NNNN.request.json beside NNNN.body (the body's exact bytes).
type RecordedRequest struct {
	Seq    int                 `json:"seq"`
	Method string              `json:"method"`
	Path   string              `json:"path"`
	Query  string              `json:"query,omitempty"`
	Header map[string][]string `json:"header"`
}

// recorder writes each API request's method, path, headers and body to a
// folder, as fixtures of what a real client sends. Credentials never reach
// the files: x-api-key, Authorization and every header whose name says it
// holds a key, token, secret, cookie or auth value are dropped.
type recorder struct {
	dir string
	mu  sync.Mutex
	n   int
}

func newRecorder(dir string) (*recorder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("record dir: %w", err)
	}
	return &recorder{dir: dir}, nil
}

// secretHeader is whether a header may carry a credential.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"key", "token", "secret", "cookie", "auth"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// record writes r's head and body and gives r a fresh reader over the
// body it read. A write error is returned to be logged by the caller; the
// request is still served.
func (rec *recorder) record(r *http.Request) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxMessagesBody+1))
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return err
	}
	rec.mu.Lock()
	if rec.n >= MaxRecorded {
		rec.mu.Unlock()
		return nil
	}
	rec.n++
	seq := rec.n
	rec.mu.Unlock()
	h := RecordedRequest{Seq: seq, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: map[string][]string{}}
	for k, v := range r.Header {
		if !secretHeader(k) {
			h.Header[strings.ToLower(k)] = slices.Clone(v)
		}
	}
	head, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	base := filepath.Join(rec.dir, fmt.Sprintf("%04d", seq))
	if err := os.WriteFile(base+".request.json", append(head, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".body", body, 0o644)
}
