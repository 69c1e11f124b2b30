package sim

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/statuswriter"
)

const (
	maxMessagesBody = 32 << 20  // the API's limit for Messages
	maxBatchBody    = 256 << 20 // and for Batches
	organizationID  = "00000000-0000-4000-8000-00000000051a"
)

// Server is the simulated API. Build it with New, serve it as an
// http.Handler, and Close it to stop its background work.
type Server struct {
	cfg   Config
	start time.Time

	ctx    context.Context // cancelled by Close; ends hangs and batch workers
	cancel context.CancelFunc
	wg     sync.WaitGroup // batch workers

	ids     atomic.Uint64 // sequence for request, message and tool ids
	arrival atomic.Uint64 // sequence for random faults

	mux      *http.ServeMux
	capacity *capacity
	limits   *orgLimits
	cache    *promptCache
	diag     *diagStore
	batches  *batchStore
	stats    *statsRecorder
	faults   *faultMemory
	rec      *recorder // nil unless Config.RecordDir is set

	// workspaceOf names the workspace of each credential hash that
	// Config.Workspaces lists.
	workspaceOf map[string]string
}

// New returns a simulator with the models set by cfg. A RecordDir that
// cannot be created panics: it is a caller's mistake, found at start.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:      cfg,
		start:    time.Now(),
		ctx:      ctx,
		cancel:   cancel,
		capacity: &capacity{slots: cfg.Capacity},
		limits:   newOrgLimits(cfg),
		cache:    newPromptCache(),
		diag:     newDiagStore(),
		batches:  newBatchStore(),
		stats:    &statsRecorder{byStatus: map[int]int64{}},
		faults:   &faultMemory{seen: map[string]bool{}},
	}
	for _, w := range cfg.Workspaces {
		for _, h := range w.Credentials {
			if s.workspaceOf == nil {
				s.workspaceOf = map[string]string{}
			}
			s.workspaceOf[h] = w.Name
		}
	}
	if cfg.RecordDir != "" {
		rec, err := newRecorder(cfg.RecordDir)
		if err != nil {
			panic("sim: " + err.Error())
		}
		s.rec = rec
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", s.handleMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	mux.HandleFunc("POST /v1/messages/batches", s.handleBatchCreate)
	mux.HandleFunc("GET /v1/messages/batches", s.handleBatchList)
	mux.HandleFunc("GET /v1/messages/batches/{id}", s.handleBatchGet)
	mux.HandleFunc("DELETE /v1/messages/batches/{id}", s.handleBatchDelete)
	mux.HandleFunc("POST /v1/messages/batches/{id}/cancel", s.handleBatchCancel)
	mux.HandleFunc("GET /v1/messages/batches/{id}/results", s.handleBatchResults)
	mux.HandleFunc("GET /v1/models", s.handleModelList)
	mux.HandleFunc("GET /v1/models/{id}", s.handleModelGet)
	mux.HandleFunc("POST /model/{model}/invoke", s.handleBedrock)
	mux.HandleFunc("POST /model/{model}/invoke-with-response-stream", s.handleBedrock)
	mux.HandleFunc("POST /model/{model}/count-tokens", s.handleBedrock)
	mux.HandleFunc("POST "+vertexPrefix+"{project}/locations/{location}/publishers/anthropic/models/{op}", s.handleVertex)
	mux.HandleFunc("GET /sim/stats", s.handleStats)
	mux.HandleFunc("POST /sim/reset", s.handleReset)
	mux.HandleFunc("GET /sim/batch-items", s.handleBatchItems)
	s.mux = mux
	return s
}

// Close stops the batch workers and releases hung requests. It waits for
// the workers to finish; it does not close listeners, which belong to the
// caller.
func (s *Server) Close() {
	// Under the batch lock, so no batch worker starts after Wait begins.
	s.batches.mu.Lock()
	s.cancel()
	s.batches.mu.Unlock()
	s.wg.Wait()
}

// ServeHTTP answers one request like the API would.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("request-id", "req_"+s.newID())
	h.Set("anthropic-organization-id", organizationID)
	sw := statuswriter.Wrap(w)
	if !strings.HasPrefix(r.URL.Path, "/sim/") { // the simulator's own endpoints are not API traffic
		if s.rec != nil {
			if err := s.rec.record(r); err != nil {
				writeError(sw, apierror.New(500, "api_error", "sim: recording the request failed: "+err.Error()))
				return
			}
		}
		backend := backendOf(r.URL.Path)
		s.stats.credential(r.Header)
		defer func() { s.stats.finish(backend, sw.Status()) }()
	}

	// Route first so an unknown path is 404 even without credentials, and a
	// known path with the wrong method is 405, as ServeMux decides.
	handler, pattern := s.mux.Handler(r)
	if pattern == "" {
		// ServeMux answers 404 and 405 in plain text; re-answer in the API's shape.
		rec := &probeWriter{header: http.Header{}}
		handler.ServeHTTP(rec, r)
		if rec.status == http.StatusMethodNotAllowed {
			sw.Header().Set("Allow", rec.header.Get("Allow"))
			writeError(sw, apierror.New(405, "invalid_request_error", "method "+r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+rec.header.Get("Allow")))
			return
		}
		writeError(sw, errNotFound("no route for "+r.Method+" "+r.URL.Path+"; see the API reference for the available endpoints"))
		return
	}
	// The clouds' handlers check their own credentials, and answer in
	// their own shapes.
	if strings.HasPrefix(r.URL.Path, "/v1/") && !strings.HasPrefix(r.URL.Path, vertexPrefix) && !hasCredentials(r) {
		writeError(sw, apierror.New(401, "authentication_error", "missing credentials: send an x-api-key header or Authorization: Bearer <key>"))
		return
	}
	s.mux.ServeHTTP(sw, r) // again through the mux, which sets the path values
}

// hasCredentials accepts either auth style. The simulator takes any key.
func hasCredentials(r *http.Request) bool {
	if strings.TrimSpace(r.Header.Get("x-api-key")) != "" {
		return true
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && strings.TrimSpace(tok) != ""
}

// newID returns a unique, seed-dependent identifier body for ids.
func (s *Server) newID() string {
	n := s.ids.Add(1)
	return idString(mix(uint64(s.cfg.Seed), n))
}

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

func idString(v uint64) string {
	var b [24]byte
	b[0], b[1] = '0', '1' // the API's ids start with 01
	x := v
	for i := 2; i < len(b); i++ {
		if i == 13 {
			x = mix(v, 0x51)
		}
		b[i] = idAlphabet[x%62]
		x /= 62
	}
	return string(b[:])
}

// probeWriter captures what ServeMux's own 404/405 handler would send.
type probeWriter struct {
	header http.Header
	status int
}

func (p *probeWriter) Header() http.Header         { return p.header }
func (p *probeWriter) Write(b []byte) (int, error) { return len(b), nil }
func (p *probeWriter) WriteHeader(code int)        { p.status = code }

// readBody reads a JSON body up to limit, mapping the failures to API errors.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apierror.Error) {
	body, err := readAllLimited(w, r, limit)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, apierror.New(413, "request_too_large", "request body exceeds the "+humanBytes(limit)+" limit for this endpoint; send less or split the work")
		}
		return nil, errInvalid("could not read the request body: " + err.Error())
	}
	return body, nil
}

func humanBytes(n int64) string {
	return strconv.FormatInt(n>>20, 10) + " MB"
}
