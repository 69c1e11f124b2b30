package record

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/internal/regfile"
)

// Exchange is what the proxy hands the recorder of one Messages exchange:
// the parts request.Parse already read, the body to walk, and what the
// answer said. The proxy fills it in on the request path; the recorder's
// own goroutine does the rest.
type Exchange struct {
	Arrival time.Time
	// Body is the request body. It is not copied: it must not change once
	// the exchange is added.
	Body      []byte
	Tenant    string // the request's tenant, hashed before it is written
	Key       string // the upstream key's short hash, hashed again with the salt
	Model     string
	Stream    bool
	MaxTokens int
	Status    int
	Usage     *Usage
	limits    *Limits
}

// SetLimits keeps the anthropic-ratelimit-*-limit values of an upstream
// answer's headers h; the last answer's win.
func (e *Exchange) SetLimits(h http.Header) {
	if l := limitsOf(h); l != nil {
		e.limits = l
	}
}

// Config configures a Recorder.
type Config struct {
	// Path is the recording file (RECORD_FILE). An existing recording
	// there is continued, with its salt; a file that is not one is
	// refused.
	Path string
	// MaxBytes bounds the recording on disk (RECORD_MAX_MB): when Path
	// reaches half of it, it becomes Path.1 (replacing the one before)
	// and a new part begins, so the two files stay within MaxBytes.
	MaxBytes int64
	// Queue bounds the exchanges waiting for the writer, QueueBytes their
	// bodies' bytes: past either, an exchange is dropped, not waited for.
	// Zero: 4096 and 64 MB.
	Queue      int
	QueueBytes int64
	// Logger gets the writer's failures. Nil: slog.Default().
	Logger *slog.Logger
}

// Recorder writes the shape of each exchange it is given to its file, on
// a goroutine of its own: Add never waits.
type Recorder struct {
	cfg     Config
	log     *slog.Logger
	ch      chan *Exchange
	pending atomic.Int64 // bytes of the bodies queued
	done    chan struct{}
	// mu orders Add's sends before Close's close: an exchange that ends
	// after Close (a client still being answered) is dropped, not a panic.
	mu     sync.RWMutex
	closed bool

	written prometheus.Counter
	dropped *prometheus.CounterVec // reason: full, too_large, write_error

	// Owned by the writer goroutine.
	f      *os.File
	w      *bufio.Writer
	size   int64
	header Header
	h      *hasher
	line   bytes.Buffer
	// before, when set (tests), runs before each exchange is written.
	before func()
}

// Open starts a recording into cfg.Path, or continues the one there.
func Open(cfg Config) (*Recorder, error) {
	if cfg.Path == "" {
		return nil, errors.New("record: no file")
	}
	if cfg.MaxBytes <= 0 {
		return nil, errors.New("record: the size bound must be positive")
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 64 << 20
	}
	r := &Recorder{cfg: cfg, log: cfg.Logger, ch: make(chan *Exchange, cfg.Queue), done: make(chan struct{}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_record_written_total",
			Help: "Messages exchanges written to RECORD_FILE."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_record_dropped_total",
			Help: "Messages exchanges not recorded: the writer's queue was full, the line was past half of RECORD_MAX_MB or the prompt had more than 65,536 blocks, or the write failed."}, []string{"reason"}),
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	for _, reason := range []string{"full", "too_large", "write_error"} {
		r.dropped.WithLabelValues(reason)
	}
	if err := r.open(); err != nil {
		return nil, err
	}
	go r.run()
	return r, nil
}

// Collectors are the recorder's metrics, for /metrics.
func (r *Recorder) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.written, r.dropped}
}

// Add queues e to be written, or drops it (and counts it) when the queue
// is full: it never waits. After Close it does nothing.
func (r *Recorder) Add(e *Exchange) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.closed {
		return
	}
	n := int64(len(e.Body))
	if r.pending.Add(n) > r.cfg.QueueBytes {
		r.pending.Add(-n)
		r.dropped.WithLabelValues("full").Inc()
		return
	}
	select {
	case r.ch <- e:
	default:
		r.pending.Add(-n)
		r.dropped.WithLabelValues("full").Inc()
	}
}

// Close writes what is queued and closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.ch)
	}
	r.mu.Unlock()
	<-r.done
	return nil
}

// open opens cfg.Path: a recording to continue, or a new one.
func (r *Recorder) open() error {
	f, err := openRecording(r.cfg.Path)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("RECORD_FILE: %w", err)
	}
	r.f, r.size = f, st.Size()
	r.w = bufio.NewWriterSize(f, 64<<10)
	if r.size == 0 {
		// A file that was there empty keeps its mode otherwise (0644
		// from touch): the header's salt lets whoever reads the file
		// test guesses of a prompt's text against its hashes. Not fatal:
		// a device or a pipe (/dev/stdout) may refuse it.
		if err := f.Chmod(0o600); err != nil {
			r.log.Warn("RECORD_FILE: could not make the file mode 0600", "err", err)
		}
		return r.begin(newHeader(1))
	}
	h, err := readHeader(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("RECORD_FILE=%s exists and is not a sluice recording (%v); move it away or name another file", r.cfg.Path, err)
	}
	salt, _ := hex.DecodeString(h.Salt)
	r.header, r.h = h, newHasher(salt)
	return nil
}

// openRecording opens path to append to, creating it 0600 where nothing
// is. A symbolic link is followed only to a file that exists (as
// /dev/stdout is): one pointing at nothing is refused, since following it
// would create the recording wherever it points. Where nothing was, the
// file is created with O_EXCL, which also refuses a link that appears
// meanwhile.
func openRecording(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode()&os.ModeSymlink != 0:
		f, err := regfile.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("RECORD_FILE=%s is a symbolic link to a file that does not exist; sluice does not create a file where a link points: name the file itself, or create the link's target", path)
		}
		if err != nil {
			return nil, fmt.Errorf("RECORD_FILE: %w", err)
		}
		return f, nil
	case errors.Is(err, fs.ErrNotExist):
		f, err := regfile.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("RECORD_FILE: %w", err)
		}
		return f, nil
	default:
		f, err := regfile.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
		if err != nil {
			return nil, fmt.Errorf("RECORD_FILE: %w", err)
		}
		return f, nil
	}
}

// newHeader is the header of a new recording: a new id and salt.
func newHeader(part int) Header {
	var id [8]byte
	var salt [32]byte
	rand.Read(id[:])
	rand.Read(salt[:])
	return Header{Recording: Version, ID: hex.EncodeToString(id[:]), Part: part, Started: time.Now().UTC(), Salt: hex.EncodeToString(salt[:])}
}

// readHeader reads the header at the start of f.
func readHeader(f io.ReaderAt) (Header, error) {
	line, err := bufio.NewReader(io.NewSectionReader(f, 0, 1<<16)).ReadBytes('\n')
	if err != nil {
		return Header{}, errors.New("no header line")
	}
	var h Header
	if err := json.Unmarshal(line, &h); err != nil || h.Recording != Version || h.ID == "" {
		return Header{}, errors.New("no header line")
	}
	if salt, err := hex.DecodeString(h.Salt); err != nil || len(salt) < 16 {
		return Header{}, errors.New("no salt in its header")
	}
	return h, nil
}

// begin writes h as the file's first line.
func (r *Recorder) begin(h Header) error {
	salt, _ := hex.DecodeString(h.Salt)
	r.header, r.h = h, newHasher(salt)
	b, _ := json.Marshal(h)
	b = append(b, '\n')
	if _, err := r.w.Write(b); err != nil {
		return fmt.Errorf("RECORD_FILE: %w", err)
	}
	r.size += int64(len(b))
	return r.w.Flush()
}

// run is the writer: it shapes each exchange and writes its line,
// flushing whenever the queue is empty, so that a quiet recording is on
// disk.
func (r *Recorder) run() {
	defer close(r.done)
	defer func() {
		r.w.Flush()
		r.f.Close()
	}()
	for e := range r.ch {
		if r.before != nil {
			r.before()
		}
		r.write(e)
		r.pending.Add(-int64(len(e.Body)))
		if len(r.ch) == 0 {
			if err := r.w.Flush(); err != nil {
				r.log.Warn("RECORD_FILE: write failed", "err", err)
			}
		}
	}
}

// write writes e's line, rotating first when it would take the file past
// half the bound.
func (r *Recorder) write(e *Exchange) {
	req, ok := shape(e, r.h)
	if !ok {
		r.dropped.WithLabelValues("too_large").Inc()
		return
	}
	r.line.Reset()
	enc := json.NewEncoder(&r.line)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(req) // plain values: cannot fail
	half := r.cfg.MaxBytes / 2
	if int64(r.line.Len()) > half-512 {
		r.dropped.WithLabelValues("too_large").Inc()
		return
	}
	if r.size+int64(r.line.Len()) > half {
		if err := r.rotate(); err != nil {
			r.log.Warn("RECORD_FILE: rotation failed; exchanges are dropped until it succeeds", "err", err)
			r.dropped.WithLabelValues("write_error").Inc()
			return
		}
	}
	n, err := r.w.Write(r.line.Bytes())
	r.size += int64(n)
	if err != nil {
		r.log.Warn("RECORD_FILE: write failed", "err", err)
		r.dropped.WithLabelValues("write_error").Inc()
		return
	}
	r.written.Inc()
}

// rotate makes the file Path.1 and begins the recording's next part in
// a new Path, with the same id and salt.
func (r *Recorder) rotate() error {
	if err := r.w.Flush(); err != nil {
		return err
	}
	if err := r.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(r.cfg.Path, r.cfg.Path+".1"); err != nil {
		return err
	}
	// O_EXCL: Path was just renamed away, so anything there now was put
	// there meanwhile (a symbolic link, say, to a file sluice must not
	// truncate): refuse it rather than follow it.
	f, err := regfile.OpenFile(r.cfg.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	r.f, r.size = f, 0
	r.w.Reset(f)
	h := r.header
	h.Part++
	return r.begin(h)
}
