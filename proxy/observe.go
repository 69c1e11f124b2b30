package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/statuswriter"
	"github.com/sluicehq/sluice/window"
)

// Observer is told about each wave and each finished POST /v1/messages
// exchange, for a live view or metrics. Its methods are called
// synchronously on the request path: they must be quick and must never
// block (drop what cannot be recorded at once).
type Observer interface {
	// WaveFlushed is called once per wave as its window closes; reason is
	// "size", "age" or "flush".
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
}

// observedKey carries an *observed through the request context, from
// observe to the scheduler's Started hook.
type observedKey struct{}

type observed struct{ member *dispatch.Member }

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
			if o, ok := ctx.Value(observedKey{}).(*observed); ok {
				o.member = m
			}
		}
	}
	return h
}

// observe wraps the Messages handler so that p's observer hears of each
// exchange; without an observer it is h itself, costing nothing.
func (p *Proxy) observe(h http.HandlerFunc) http.Handler {
	if p.obs == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := &observed{}
		sw := statuswriter.Wrap(w)
		ex := Exchange{Request: r, Start: time.Now()}
		h(sw, r.WithContext(context.WithValue(r.Context(), observedKey{}, o)))
		ex.End = time.Now()
		ex.Status = sw.Status()
		if ex.Status == 0 {
			ex.Status = 499
		}
		if m := o.member; m != nil {
			ex.Granted, ex.Released = m.Granted(), m.Released()
			ex.Wave, ex.Reason, ex.QueueWait = m.WaveID(), m.FlushReason().String(), m.QueueWait()
		} else if p.sched == nil && ex.Status != 499 {
			ex.Granted, ex.Released = ex.Start, ex.End
		}
		p.obs.RequestDone(ex)
	})
}
