package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/retry"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/sse"
)

// turn is a request's hold on the upstream while its answer is fetched
// (stage 5, fetch.go): on the windowed path its place in its wave, a
// *dispatch.Member holding a gate slot (memberTurn); on the plain path
// (BATCH_ENABLED=0) the request alone, which skips the window and the
// gate (plainTurn). forward, fetch, attempt and again are written once,
// for a turn; what differs between the paths is here.
type turn interface {
	// open notes what the wait for the turn taught, as the call begins.
	open(ctx context.Context, ex *exchange)
	// route is the backend key of ex's next attempt, with routing on:
	// the one the scheduler chose, or one chosen now, away from the keys
	// that failed it. nil: ex may use none.
	route(ex *exchange) *route.Key
	// waits says a failed attempt may wait to be tried again (a backoff,
	// the upstream's retry-after) and may be sent again after it may have
	// reached the upstream. The plain path, a pass-through, does neither:
	// it only fails over, at once, what another key may take.
	waits() bool
	// requeue gives the turn's hold back for wait, a retry's, and takes
	// it again (see again).
	requeue(ctx context.Context, ex *exchange, cause retry.Cause, wait time.Duration) error
	// used is what the answer's usage teaches the turn's policies.
	used(u usage)

	// Deadline is when the call must have its headers by; zero: none.
	Deadline() time.Time
	// LiftDeadline ends the deadline's hold once a stream's headers are
	// in; false: it had passed.
	LiftDeadline() bool
	// Settle tells the turn's policies of an upstream answer.
	Settle(status int, h http.Header)
	// MarkBegun says the answer has begun: its followers may go.
	MarkBegun()
	// FirstToken says how long after the call was sent a stream's first
	// token came.
	FirstToken(d time.Duration)
}

var (
	_ turn = memberTurn{}
	_ turn = (*plainTurn)(nil)
)

// memberTurn is a windowed request's turn: its member, which holds a gate
// slot while its function runs.
type memberTurn struct{ *dispatch.Member }

func (t memberTurn) open(ctx context.Context, ex *exchange) {
	m := t.Member
	ex.tenant = m.Tenant()
	ex.rec.wave, ex.rec.queueWait = m.WaveID(), m.QueueWait()
	if ex.p.buckets != nil {
		ex.rec.bucketWait = ex.p.buckets.Waited(m)
	}
	ex.p.metrics.SlotWait.Observe(m.SlotWait().Seconds())
	ex.p.metrics.QueueWait.Observe(m.QueueWait().Seconds())
	st := cacheaware.StandingOf(m)
	ex.observeCache(st)
	if ex.p.tracer != nil {
		ex.p.traceWaits(ctx, ex.rec, m)
	}
	if st.Role == cacheaware.CacheLeader && !ex.desc.Stream {
		// Its followers wait for its first token, not its whole answer.
		if b, err := sse.StreamingBody(ex.body.data); err == nil {
			ex.streamed = b
		}
	}
}

// route is the key the scheduler routed the member to as it left its
// wave, or as it was let go after a requeue (route.Scheduling).
func (t memberTurn) route(ex *exchange) *route.Key {
	k, _, failovers := route.KeyOf(t.Member)
	ex.rec.failovers = failovers
	return k
}

func (memberTurn) waits() bool { return true }

func (t memberTurn) requeue(ctx context.Context, ex *exchange, cause retry.Cause, wait time.Duration) error {
	if ex.p.tracer == nil {
		return t.Requeue(ctx, wait)
	}
	span := ex.p.startRetryWaitSpan(ctx, ex.rec, cause, wait)
	err := t.Requeue(ctx, wait)
	endRetryWaitSpan(span, err)
	return err
}

// used tells the scheduler's policies the answer's usage: the pacing
// corrects its key's rate-limit debit (RATE_LIMIT_PACING=buckets), the
// cache-aware release learns whether its prefix was read.
func (t memberTurn) used(u usage) {
	t.Used(dispatch.Usage{Input: int(u.Input), CacheWrite: int(u.CacheWrite), Output: int(u.Output), CacheRead: int(u.CacheRead)})
}

// plainTurn is a plain-path request's turn: no wave, no slot, no
// deadline; with routing on, its way through the backend keys.
type plainTurn struct{ trail route.Trail }

func (*plainTurn) open(context.Context, *exchange) {}

// route fails over from the key of the latest attempt, if any, and routes
// the request again now.
func (t *plainTurn) route(ex *exchange) *route.Key {
	p := ex.p
	t.trail.Leave(p.routes)
	ex.rec.failovers = len(t.trail.Tried)
	t.trail.Key, t.trail.Why = p.routes.Route(p.router, &ex.desc, t.trail.Tried, time.Now())
	return t.trail.Key
}

// end gives the request's place in its key's load back.
func (t *plainTurn) end(p *Proxy) {
	if p.routes != nil {
		t.trail.End(p.routes)
	}
}

func (*plainTurn) waits() bool { return false }

func (*plainTurn) requeue(context.Context, *exchange, retry.Cause, time.Duration) error {
	return nil // nothing held: it goes again at once
}

func (*plainTurn) used(usage)                 {}
func (*plainTurn) Deadline() time.Time        { return time.Time{} }
func (*plainTurn) LiftDeadline() bool         { return true }
func (*plainTurn) Settle(int, http.Header)    {}
func (*plainTurn) MarkBegun()                 {}
func (*plainTurn) FirstToken(d time.Duration) {}
