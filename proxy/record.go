package proxy

import (
	"net/http"

	recording "github.com/sluicehq/sluice/record"
	"github.com/sluicehq/sluice/request"
)

// The hooks of RECORD_FILE (package record): each does nothing unless the
// proxy records. What is on the request path is a few assignments and,
// once the answer is out, a send that never waits; the body is walked into
// blocks on the recorder's own goroutine.

// recordArrival starts the recorded shape of a Messages request, from
// what inspect read of it.
func (p *Proxy) recordArrival(rec *record, body []byte, d *request.Descriptor) {
	if p.recorder == nil {
		return
	}
	rec.shape = &recording.Exchange{Arrival: rec.start, Body: body, Tenant: d.Tenant, Key: d.Key, Model: d.Model,
		Stream: d.Stream, MaxTokens: d.Cost.MaxTokens}
}

// recordAnswer keeps the rate limits an upstream answer's headers h state.
func (rec *record) recordAnswer(h http.Header) {
	if rec.shape != nil {
		rec.shape.SetLimits(h)
	}
}

// recordUsage keeps the answer's usage.
func (rec *record) recordUsage(u usage) {
	if rec.shape != nil {
		rec.shape.Usage = &recording.Usage{Input: u.Input, Output: u.Output, CacheWrite: u.CacheWrite, CacheRead: u.CacheRead}
	}
}

// recordDone hands the finished exchange to the recorder.
func (p *Proxy) recordDone(rec *record, status int) {
	if rec.shape == nil {
		return
	}
	rec.shape.Status = status
	p.recorder.Add(rec.shape)
	rec.shape = nil
}
