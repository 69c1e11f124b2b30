package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/upstream"
)

// This file is the life of one POST /v1/messages request, in the order
// it is lived; each stage is a function named for it, and the stages that
// take a file of their own say where it is.
//
//  1. read      the method, a shed before the read when the queue is full,
//               and the body, under BODY_BUDGET_MB (body.go)
//  2. describe  what the policies know of it: its model, cost, prefixes,
//               inbound key and tenant; refused here if its key may not
//               use its model (inspect.go, inbound.go, tenants.go)
//  3. admit     the scheduler's admission: the budgets, the queue's
//               bound, the client's patience, its tenant's limits
//               (package dispatch); on the plain path the budgets are
//               asked in describe (budget.go)
//  4. wait      its window, its wave's release (cache-aware or not), its
//               key's rate-limit line, a gate slot; in place, or parked
//               without a goroutine (packages dispatch, gate, park)
//  5. fetch     in its slot: the upstream attempts, and the one decision
//               to try again, which gives the slot back for the backoff
//               (fetch.go); a stream is relayed as it comes (events.go)
//  6. answer    the reply, a stream's last events, or the failure's
//               Anthropic-shaped error (answers.go); an answer's usage
//               goes back to the policies that spent on it (usage.go)
//  7. conclude  how it ended counted; what it held given back; a parked
//               connection let go
//
// With BATCH_ENABLED=0 (the plain path) stages 3 and 4 are skipped: the
// request is fetched at once, in a turn of its own that holds no slot
// (turn.go), and a failed attempt is only failed over to another key.

// messages handles POST /v1/messages.
func (p *Proxy) messages(w http.ResponseWriter, r *http.Request) {
	body, ok := p.read(w, r)
	if !ok {
		return
	}
	ex, ok := p.describe(w, r, body)
	if !ok {
		return
	}
	if p.sched == nil {
		if p.takeOver(ex) {
			return
		}
		ctx := p.begin(ex.r.Context(), &ex.serving)
		defer p.end(&ex.serving)
		defer ex.plain.end(p)
		p.conclude(ctx, ex, ex.forwardPlain(ctx))
		return
	}
	p.budget.Request()
	// r's body is spent; dropping it lets go of the server's read buffer,
	// which it points into, for as long as r is kept.
	r.Body = http.NoBody
	if p.waitParked(ex) || p.takeOver(ex) {
		return // concluded when the scheduler calls back, or the connection was lost
	}
	ctx := p.begin(ex.r.Context(), &ex.serving)
	defer p.end(&ex.serving)
	// Admitted, it waits here; forward runs on this goroutine once it
	// holds its slot.
	p.conclude(ctx, ex, p.sched.Do(ctx, p.admitted(ex), ex.forwardMember))
}

// read is stage 1: it checks the method, sheds the request before
// reading it when the queue is already full, and reads the body. It
// reports false once it has answered.
func (p *Proxy) read(w http.ResponseWriter, r *http.Request) (heldBody, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		apierror.WriteSluice(w, errMethod("POST"))
		return heldBody{}, false
	}
	// Under overload the cheapest answer is the best one. The scheduler's
	// admission enforces the cap exactly; this only saves the read.
	rec := recordOf(r)
	rec.windowed = p.sched != nil
	if p.sched != nil && p.sched.Full() {
		p.metrics.Shed.Inc()
		apierror.WriteSluice(w, p.mapError(dispatch.ErrQueueFull))
		return heldBody{}, false
	}
	// The body is read before queuing: Go's server only notices a client
	// that hangs up once the handler has consumed the request body.
	return p.takeBody(w, r)
}

// describe is stage 2: what the policies will know of the request, from
// its body and headers. A body the API would refuse, or a model the
// request's inbound key may not use, is answered here (it reports false).
func (p *Proxy) describe(w http.ResponseWriter, r *http.Request, body heldBody) (*exchange, bool) {
	info, blocks, aerr := inspect(body.data, r.Header)
	if info.Inbound = inboundOf(r); aerr == nil && !allowsModel(info.Inbound, info.Model) {
		aerr = errModelNotAllowed(info.Inbound, info.Model)
	}
	if aerr == nil && p.routes != nil && !p.routes.Allows(info.Inbound) {
		aerr = errNoBackend(info.Inbound) // before it waits for a turn it cannot use
	}
	if aerr != nil {
		p.bodies.release(body.reserved)
		apierror.WriteSluice(w, aerr)
		return nil, false
	}
	info.Tenant, info.Class = p.tenants.Identify(info, r.Header)
	dropGatewayIdentity(r.Header)
	if p.routes != nil {
		info.Session = sessionOf(r.Header, &info)
	}
	rec := recordOf(r)
	rec.model, rec.stream, rec.bytesIn, rec.tenant = info.Model, info.Stream, int64(len(body.data)), info.Tenant
	if !p.withinBudget(w, &info, body) {
		return nil, false
	}
	p.recordArrival(rec, body.data, &info)
	return &exchange{p: p, w: w, r: r, body: body, rec: rec, desc: info, why: p.why.Explain(blocks)}, true
}

// forwardPlain is stage 5 on the plain path: forward, its panic contained
// as the scheduler contains a windowed request's (a *dispatch.PanicError,
// answered 500 and logged by conclude), so that a bug there costs the
// client an error answer, not a closed connection.
func (ex *exchange) forwardPlain(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &dispatch.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return ex.forward(ctx, &ex.plain)
}

// admitted is what the scheduler's policies know of ex's request: its
// descriptor, whose patience counts only when ADMIT_BY_CLIENT_TIMEOUT is
// on.
func (p *Proxy) admitted(ex *exchange) *request.Descriptor {
	if !p.cfg.AdmitByClientTimeout {
		ex.desc.Patience = 0
	}
	return &ex.desc
}

// waitParked is stage 4 for a request with many ahead of it: it will wait
// long for its turn, so it waits parked, without net/http's connection
// goroutine and buffers (see package park), and the scheduler calls conclude
// back when its passage is over. It reports false when the request should
// wait in place instead: its turn is near (not worth the takeover), or its
// connection cannot be parked (HTTP/2, say).
func (p *Proxy) waitParked(ex *exchange) bool {
	if p.parkWhen >= 0 && p.sched.Queued() < p.parkWhen {
		return false
	}
	rw, gone := p.takeConn(ex)
	if rw == nil {
		return gone
	}
	// From here no goroutine waits for this request: the scheduler calls
	// back when it is over, from the goroutine its call ran on.
	ctx := p.begin(rw.Context(), &ex.serving)
	over := func(err error) {
		defer p.end(&ex.serving)
		p.conclude(ctx, ex, err)
	}
	if err := p.sched.Start(ctx, p.admitted(ex), ex.forwardMember, over); err != nil {
		over(err) // not admitted: answered at once
	}
	return true
}

// conclude is stages 6 and 7, the end of every Messages request, whichever
// way it came: its passage ended with err (nil: forward left an answer in
// ex); ctx ends when its client leaves. It counts how a windowed request
// ended, answers, and gives back what the request held; a parked request's
// connection is then let go. A panic here is recovered either way (see
// letGo, contain).
func (p *Proxy) conclude(ctx context.Context, ex *exchange, err error) {
	defer ex.releaseBody()
	if ex.parked != nil {
		defer p.letGo(ctx, ex)
	} else {
		defer p.contain(ctx, ex)
	}
	if err != nil && ex.rec.windowed {
		p.countFailure(ctx, err)
	}
	ex.rec.retries = ex.retries
	ex.answer(ctx, err)
}

// letGo ends a parked request: its access line and metrics, its last
// buffered bytes, and its connection handed back to net/http. It is
// deferred by conclude, and recovers a panic there: outside the scheduler's
// containment of fn, nobody else would catch it.
func (p *Proxy) letGo(ctx context.Context, ex *exchange) {
	rw := ex.parked
	if v := recover(); v != nil {
		p.panicked(ctx, rw, rw.Status(), v)
	}
	// Counted before Finish sends the last buffered bytes (Finish answers
	// 200 to a request that got nothing), the access line written after,
	// as ServeHTTP does: off the latency path.
	line, logged := p.account(ex.r, ex.rec, rw.Status(), rw.Written())
	rw.Finish()
	if logged {
		p.logAccess(ex.r, ex.rec, line)
	}
}

// contain recovers a panic in conclude for a request waiting in place (or
// on the plain path), as letGo does for a parked one: net/http's own
// recovery would close the connection with the answer still in its
// buffer, and log it nowhere the operator reads. The handler then returns
// as usual, and ServeHTTP writes the access line.
func (p *Proxy) contain(ctx context.Context, ex *exchange) {
	if v := recover(); v != nil {
		status := 0
		if sw, ok := ex.w.(interface{ Status() int }); ok {
			status = sw.Status()
		}
		p.panicked(ctx, ex.w, status, v)
	}
}

// panicked logs the panic v of a request's conclude, and answers it with
// errInternal unless its answer had begun (status, 0 if not) or its
// client left.
func (p *Proxy) panicked(ctx context.Context, w http.ResponseWriter, status int, v any) {
	p.log.Error("request handler panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	if status == 0 && ctx.Err() == nil {
		apierror.WriteSluice(w, errInternal)
	}
}

// countFailure counts how a windowed request that failed with err ended.
// Apart from conclude: errors.As's targets escape, and declared in conclude
// they cost two allocations on every request, answered or not.
func (p *Proxy) countFailure(ctx context.Context, err error) {
	var tooLong *dispatch.WaitTooLongError
	var tenantFull *dispatch.TenantFullError
	switch {
	case errors.Is(err, dispatch.ErrQueueFull), errors.As(err, &tooLong), errors.As(err, &tenantFull):
		p.metrics.Shed.Inc()
	case errors.Is(err, dispatch.ErrDeadline):
		p.metrics.Deadlines.Inc()
	case ctx.Err() != nil && context.Cause(ctx) != errShuttingDown:
		p.metrics.Departed.Inc()
	}
}

// answer is stage 6: once the request's passage is over (on the windowed
// path, after its slot was given back) it writes the reply forward
// fetched, waits for a stream's last events to reach the client, or
// answers the failure err.
func (ex *exchange) answer(ctx context.Context, err error) {
	switch {
	case ex.out != nil:
		// A stream: its writer finishes by itself, and a failure after its
		// status was sent has been told in-band. A panic has not been
		// told anyone.
		ex.out.wait()
		if err != nil {
			ex.p.logPanic(err)
		}
		if ex.rec.clientCut = ex.out.cutFor(); ex.rec.clientCut == "client_idle" {
			ex.p.metrics.ClientStalls.Inc() // a stall's is counted as it is cut
		}
	case err == nil && ex.reply != nil:
		ex.writeReply(ex.reply)
	case err == nil:
	case context.Cause(ctx) == errShuttingDown:
		apierror.WriteSluice(ex.w, errShutdownCut)
	case ctx.Err() != nil:
		// the client left: nobody to answer
	default:
		apierror.WriteSluice(ex.w, ex.p.failure(&ex.desc, err, !ex.sent.IsZero()))
	}
}

// heldKey reports whether ex went upstream with a key sluice holds, not
// the client's: a sluice key stood in for it (inbound keys), or it was
// routed to a backend's key.
func (ex *exchange) heldKey() bool {
	return ex.desc.Inbound != nil || ex.key != nil
}

// errHeldKeyRefused answers a request whose upstream refused the key
// sluice holds for it.
var errHeldKeyRefused = &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
	Message: "the upstream refused the API key sluice holds and sends for you (401): this is sluice's configuration, not your key; retry later, and tell whoever runs this sluice (the request id is in its log)"}

// releaseBody gives the body's share of the budget back, once: at the
// latest when the request is concluded, and when its stream begins (see
// letGoOfBody). Both run on the goroutine that runs the request.
func (ex *exchange) releaseBody() {
	ex.p.bodies.release(ex.body.reserved)
	ex.body.reserved = 0
}

// letGoOfBody lets go of the request's body once its stream is being
// relayed: a stream that has begun is never sent again (no retry, no
// failover), and an agent's stream, open for minutes, would otherwise
// hold its 50-200 KB and its share of BODY_BUDGET_MB all that time. Every
// reference sluice keeps goes: the exchange's, the reassembly's, and what
// the upstream transport holds to resend (see upstream.Body), so that the
// bytes are collected while the stream goes on. Only RECORD_FILE keeps the
// body, to be walked once the exchange ends; its share of the budget is
// kept with it.
func (ex *exchange) letGoOfBody() {
	if ex.sending != nil {
		ex.sending.Release()
		ex.sending = nil
	}
	ex.body.data, ex.streamed = nil, nil
	if ex.rec.shape == nil {
		ex.releaseBody()
	}
}

// writeReply writes a whole upstream answer to the client.
func (ex *exchange) writeReply(rep *reply) {
	if rep.status == http.StatusUnauthorized && ex.heldKey() {
		// The upstream refused the key sluice sent, not the client's:
		// relayed, the client would take its own key for the bad one.
		ex.p.metrics.KeyRefused.Inc()
		ex.p.log.Error("the upstream refused the API key sluice holds (401); fix UPSTREAM_KEY_FILE, ANTHROPIC_API_KEY or the backend's keys",
			"backend", ex.rec.backend, "upstream_request_id", ex.rec.upstreamID)
		apierror.WriteSluice(ex.w, errHeldKeyRefused)
		return
	}
	h := ex.w.Header()
	upstream.CopyHeader(h, rep.header)
	h.Set("Content-Length", strconv.Itoa(len(rep.data)))
	// No slot is held any more, but the handler is: a client that stops
	// reading must not keep it past the idle timeout.
	rc := http.NewResponseController(ex.w)
	_ = rc.SetWriteDeadline(time.Now().Add(ex.p.cfg.StreamIdleTimeout))
	ex.w.WriteHeader(rep.status)
	writeRenewing(ex.w, rc, rep.data, ex.p.cfg.StreamIdleTimeout)
	if rep.status == http.StatusOK && !rep.counted {
		// After the write: the client has its answer before sluice spends
		// a decode on the metrics.
		ex.countMessageTokens(rep.data)
	}
}
