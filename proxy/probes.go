package proxy

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/metrics"
)

// What sluice says of itself: the probes, the root, and the state the
// metrics and the page read.

// GateStats reports the gate's occupancy; zero when windowing is off.
func (p *Proxy) GateStats() gate.Stats {
	if p.gate == nil {
		return gate.Stats{}
	}
	return p.gate.Stats()
}

// healthz answers liveness: the process is up and serving HTTP, draining
// or not.
func (p *Proxy) healthz(w http.ResponseWriter, r *http.Request) {
	writeProbe(w, r, http.StatusOK, `{"status":"ok"}`)
}

// readyz answers readiness: 200 while serving, 503 once shutdown has been
// signalled (for SHUTDOWN_DELAY_S sluice then serves on, so that probes
// see it; after that its listener is closed, which a probe sees too).
func (p *Proxy) readyz(w http.ResponseWriter, r *http.Request) {
	if p.draining.Load() {
		writeProbe(w, r, http.StatusServiceUnavailable,
			`{"status":"draining","message":"sluice is shutting down: it finishes the requests it has accepted and takes no new ones; send them to another instance"}`)
		return
	}
	writeProbe(w, r, http.StatusOK, `{"status":"ready"}`)
}

// root answers GET / with what sluice is and where to go: the page when
// UI_ENABLED, the docs, the probes. Other methods on / are relayed as any
// unknown path is.
func (p *Proxy) root(w http.ResponseWriter, r *http.Request) {
	v := struct {
		Service string `json:"service"`
		Message string `json:"message"`
		UI      string `json:"ui,omitempty"`
		Docs    string `json:"docs"`
		Health  string `json:"health"`
		Ready   string `json:"ready"`
		Metrics string `json:"metrics,omitempty"`
	}{Service: "sluice", Docs: docsURL, Health: "/healthz", Ready: "/readyz",
		Message: "sluice is a proxy in front of the Anthropic API: set an SDK's base URL to this address and send API requests, such as POST /v1/messages, with your own API key"}
	if p.inbound != nil {
		v.Message = "sluice is a proxy in front of the Anthropic API: set an SDK's base URL to this address and send API requests, such as POST /v1/messages, with the sluice key you were given as the API key"
	}
	if p.cfg.UIEnabled && !p.split() {
		v.UI = "/ui/"
	}
	if p.cfg.MetricsEnabled && !p.split() {
		v.Metrics = "/metrics"
	}
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// Queued reports how many windowed requests are waiting, in an open window
// or for a slot; zero when windowing is off.
func (p *Proxy) Queued() int {
	if p.sched == nil {
		return 0
	}
	return p.sched.Queued()
}

// RateLimitBuckets is every upstream key's estimated rate-limit buckets,
// for the metrics and the live view; nil unless RATE_LIMIT_PACING=buckets
// (on the windowed path).
func (p *Proxy) RateLimitBuckets() []metrics.Bucket {
	if p.buckets == nil {
		return nil
	}
	levels := p.buckets.Levels(time.Now())
	out := make([]metrics.Bucket, len(levels))
	for i, l := range levels {
		out[i] = metrics.Bucket{Key: l.Key, Limit: l.Kind.String(), Size: l.Limit, Level: l.Level}
	}
	return out
}
