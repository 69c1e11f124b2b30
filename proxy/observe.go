package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/window"
)

// Observer is told about each wave and each finished POST /v1/messages
// exchange, for a live view or metrics. Its methods are called
// synchronously on the request path: they must be quick and must never
// block (drop what cannot be recorded at once).
type Observer interface {
	// WaveFlushed is called once per wave as its window closes; reason is
	// "size", "age", "flush" or "idle".
	WaveFlushed(id uint64, size int, reason string)
	// RequestDone is called once per Messages exchange, as it ends.
	RequestDone(ex Exchange)
}

// Exchange describes one finished Messages exchange.
type Exchange struct {
	// Request is the client's request; read it only during RequestDone.
	Request *http.Request
	// Start is when sluice began handling the request.
	Start time.Time
	// Granted is when its upstream call could begin: when it got its slot
	// (windowed) or Start (plain path). Zero if it never got a slot.
	Granted time.Time
	// Released is when it gave its slot back (windowed) or the exchange
	// ended (plain path). Zero if it never got a slot.
	Released time.Time
	// End is when the exchange ended.
	End time.Time
	// Wave is the id of its wave and Reason why the wave closed; 0 and ""
	// on the plain path or for a request that never got a slot.
	Wave   uint64
	Reason string
	// QueueWait is the time spent in the window and waiting for a slot.
	QueueWait time.Duration
	// Status is the HTTP status sent to the client, or 499 if the client
	// left before any was sent.
	Status int
	// Cache is what CACHE_AWARE made of it: its role (none, leader,
	// follower, warm), and how long a follower was held for its leader.
	Cache cacheaware.Standing
	// Tenant is the request's tenant (see TENANT_FROM).
	Tenant string
}

// dispatchHooks are the scheduler's hooks: they count waves in the metrics
// and, when obs is set, feed it.
func (p *Proxy) dispatchHooks(obs Observer) dispatch.Hooks {
	h := dispatch.Hooks{Flushed: func(id uint64, size int, reason window.Reason) {
		p.metrics.Flushes.WithLabelValues(reason.String()).Inc()
		p.metrics.WaveSize.Observe(float64(size))
		if obs != nil {
			obs.WaveFlushed(id, size, reason.String())
		}
	}}
	if obs != nil {
		h.Started = func(ctx context.Context, m *dispatch.Member) {
			if rec, ok := ctx.Value(recordKey{}).(*record); ok {
				rec.member = m
			}
		}
	}
	return h
}

// observeDone tells p's observer of a finished Messages exchange.
func (p *Proxy) observeDone(r *http.Request, rec *record, status int, end time.Time) {
	ex := Exchange{Request: r, Start: rec.start, End: end, Status: status, Cache: rec.cache, Tenant: rec.tenant}
	if m := rec.member; m != nil {
		ex.Granted, ex.Released = m.Granted(), m.Released()
		ex.Wave, ex.Reason, ex.QueueWait = m.WaveID(), m.FlushReason().String(), m.QueueWait()
	} else if p.sched == nil && status != 499 {
		ex.Granted, ex.Released = ex.Start, ex.End
	}
	p.obs.RequestDone(ex)
}
