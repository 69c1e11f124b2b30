// Package web is sluice's page at /ui/: replays of real runs of the bench
// engine, one lane per mode side by side (the bench suite's scenarios,
// shipped as traces with their verdict lines, the page's own burst, or a
// burst run on request), and a live view of the running proxy. Everything
// it serves is embedded in the binary; it needs no network.
package web

import (
	"context"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/apierror"
)

//go:generate go run ./gentrace -out static/trace-default.json -traces static/traces

//go:embed static
var static embed.FS

// Prefix is where the page is mounted.
const Prefix = "/ui/"

// Options configure the page's handler. The zero value serves the replay
// with no live view.
type Options struct {
	// Live feeds the live view; if nil, GET /ui/api/live answers 404.
	Live *Live
	// Context ends the live view's open event streams when it is done (so
	// that a graceful shutdown is not held up by a watcher). If nil, they
	// end only when their client leaves.
	Context context.Context
	// Logger receives one line per failed replay run. If nil, slog.Default().
	Logger *slog.Logger
	// MaxWatchers bounds the live views open at once (LIVE_MAX_WATCHERS):
	// each costs the proxy some CPU, so without a bound enough open tabs
	// would slow every request down. One more is answered 503. If zero,
	// DefaultMaxWatchers.
	MaxWatchers int
	// NoRuns refuses the bench runs the page asks for (POST /ui/api/run)
	// with 403: each run spends the server's CPU for up to 30 s, which
	// nobody beyond this host should be able to ask for (UI_BENCH_RUNS).
	NoRuns bool
	// Run runs the page's burst through the plain and the windowed path
	// and returns its trace (POST /ui/api/run): cmd/sluice gives it
	// benchtrace.Run, so that this package does not import the bench. If
	// nil, runs are refused as with NoRuns.
	Run func(context.Context, Params) (*Trace, error)
	// Bulk, if set, lists the bulk endpoint's batches for the page
	// (GET /ui/api/bulk); if nil, the page says the endpoint is off.
	Bulk BulkBatches
}

// DefaultMaxWatchers is LIVE_MAX_WATCHERS's default: a team's worth of
// open tabs, well below the 1,500 at which watchers were measured to raise
// sluice's CPU tenfold.
const DefaultMaxWatchers = 64

// Handler serves the page under /ui/ and its API under /ui/api/.
type Handler struct {
	opt      Options
	mux      *http.ServeMux
	runner   *runner
	bulkFeed *bulkFeed
	shipped  *shipped
}

// New returns the handler for /ui/.
func New(opt Options) *Handler {
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.Context == nil {
		opt.Context = context.Background()
	}
	if opt.MaxWatchers <= 0 {
		opt.MaxWatchers = DefaultMaxWatchers
	}
	h := &Handler{opt: opt, mux: http.NewServeMux(), runner: newRunner(opt.Logger, opt.Run), bulkFeed: &bulkFeed{src: opt.Bulk}, shipped: &shipped{}}
	sub, _ := fs.Sub(static, "static")
	files := http.StripPrefix("/ui", http.FileServerFS(sub))
	h.mux.Handle("/ui/", noCache(getOnly(files)))
	h.mux.HandleFunc("GET /ui/api/default", h.defaultTrace)
	h.mux.HandleFunc("GET /ui/api/traces", h.traces)
	h.mux.HandleFunc("GET /ui/api/traces/{name}", h.trace)
	switch {
	case opt.NoRuns:
		h.mux.HandleFunc("POST /ui/api/run", func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusForbidden, "permission_error",
				"bench runs from the page are off on this sluice (UI_BENCH_RUNS; off by default when the page is served beyond loopback): run `sluice bench` from a shell instead")
		})
	case opt.Run == nil:
		h.mux.HandleFunc("POST /ui/api/run", func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusForbidden, "permission_error",
				"this server has no bench runs for the page: run `sluice bench` from a shell instead")
		})
	default:
		h.mux.HandleFunc("POST /ui/api/run", h.runner.serve)
	}
	h.mux.HandleFunc("GET /ui/api/live", h.live)
	h.mux.HandleFunc("GET /ui/api/bulk", h.bulk)
	h.mux.HandleFunc("/ui/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found_error", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	h.mux.Handle("/ui", http.RedirectHandler(Prefix, http.StatusMovedPermanently))
	return h
}

// ServeHTTP routes r.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Mount returns a handler that sends /ui and everything under /ui/ to ui
// and the rest to next.
func Mount(ui, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.Path; p == "/ui" || len(p) >= len(Prefix) && p[:len(Prefix)] == Prefix {
			ui.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) defaultTrace(w http.ResponseWriter, r *http.Request) {
	b, err := static.ReadFile("static/trace-default.json")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "api_error", "the default trace is missing from the binary")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// getOnly refuses methods other than GET and HEAD.
func getOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", r.Method+" is not allowed here; use GET")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// noCache keeps a browser from mixing files of two builds.
func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

// writeError answers with an Anthropic-shaped error body. The page is
// served in front of the proxy (Mount) or on the admin listener, not
// through it, so its answers carry no request id.
func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	apierror.Write(w, "", apierror.New(status, typ, msg))
}
