package proxy

import (
	"net/http"

	"github.com/sluicehq/sluice/apierror"
)

// The admin listener (ADMIN_LISTEN_ADDR): what only the people who run
// sluice should see (the metrics, the page with its live feed and its
// bench runs) on an address of its own, so that the API port can face
// clients. With it set, the API port answers those paths 404.

// adminOnly answers, on the API port, a path that the admin listener
// serves.
func adminOnly(w http.ResponseWriter, r *http.Request) {
	apierror.WriteSluice(w, &apierror.Error{Status: http.StatusNotFound, Type: "not_found_error",
		Message: r.URL.Path + " is not served on this address: this sluice serves its metrics and its page on its admin listener (ADMIN_LISTEN_ADDR)"})
}

// split reports whether the admin paths are on an admin listener.
func (p *Proxy) split() bool { return p.cfg.AdminListenAddr != "" }

// AdminHandler is what the admin listener serves: GET /metrics (when
// METRICS_ENABLED), ui (the page, if not nil) at /ui and under /ui/, the
// probes, and an Anthropic-shaped 404 for anything else; never the proxy.
func (p *Proxy) AdminHandler(ui http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", p.healthz)
	mux.HandleFunc("/readyz", p.readyz)
	if p.cfg.MetricsEnabled {
		mux.Handle("GET /metrics", p.metrics.Handler())
	}
	p.mountAdminAPI(mux)
	if ui != nil {
		mux.Handle("/ui", ui)
		mux.Handle("/ui/", ui)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		apierror.WriteSluice(w, &apierror.Error{Status: http.StatusNotFound, Type: "not_found_error",
			Message: "this is sluice's admin listener: it serves /metrics, the page at /ui/ and the probes; send API requests to LISTEN_ADDR"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if aerr := p.refuseRelay(r); aerr != nil {
			apierror.WriteSluice(w, closing(w, aerr))
			return
		}
		if !isCleanPath(r.URL.Path) {
			apierror.WriteSluice(w, &apierror.Error{Status: http.StatusNotFound, Type: "not_found_error",
				Message: "the path has empty or dot segments; ask for /metrics or /ui/"})
			return
		}
		mux.ServeHTTP(w, r)
	})
}
