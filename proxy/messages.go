package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/park"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/retry"
	"github.com/sluicehq/sluice/upstream"
)

// messages handles POST /v1/messages: windowed when BATCH_ENABLED, else
// forwarded at once.
func (p *Proxy) messages(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, errMethod("POST"))
		return
	}
	// Shed before reading the body when the queue is already full: under
	// overload the cheapest answer is the best one. The scheduler's
	// admission enforces the cap exactly; this only saves the read.
	rec := recordOf(r)
	rec.windowed = p.sched != nil
	if p.sched != nil && p.sched.Full() {
		p.metrics.Shed.Inc()
		writeError(w, p.mapError(dispatch.ErrQueueFull))
		return
	}
	// The body is read before queuing: Go's server only notices a client
	// that hangs up once the handler has consumed the request body.
	body, aerr := readBody(w, r, maxMessagesBody)
	if aerr != nil {
		if aerr != errClientGone {
			writeError(w, aerr)
		}
		return
	}
	info, aerr := inspect(body)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	rec.model, rec.stream = info.Model, info.Stream
	ex := &exchange{p: p, w: w, r: r, body: body, rec: rec}
	if p.sched == nil {
		ex.finish(r.Context(), ex.forward(r.Context(), nil))
		return
	}
	p.budget.Request()
	// A request with many ahead of it will wait long for its turn: park
	// it, so that it waits without net/http's connection goroutine and
	// buffers (see park). r's body is spent; dropping it lets go of the
	// server's read buffer, which it points into, for as long as r is kept.
	r.Body = http.NoBody
	if p.parkWhen >= 0 && p.sched.Queued() < p.parkWhen {
		p.waitInPlace(ex) // its turn is near: not worth the takeover
		return
	}
	rw, err := p.parker.Park(w, r)
	switch {
	case errors.Is(err, park.ErrNotParkable): // HTTP/2, say
		p.waitInPlace(ex)
		return
	case err != nil:
		// The connection was taken over and then found unusable (a
		// listener serving TLS, say): there is nobody left to answer.
		p.log.Error("parking failed; the connection is closed", "err", err)
		return
	}
	rec.parked = true
	ex.w = rw
	// From here no goroutine waits for this request: the scheduler calls
	// back when it is over, from the goroutine its call ran on.
	ctx := rw.Context()
	over := func(err error) { p.settleParked(ctx, ex, rw, err) }
	if err := p.sched.Start(ctx, p.describe(ex), ex.forward, over); err != nil {
		over(err) // not admitted: answered at once
	}
}

// waitInPlace sends ex through the scheduler on the handler's own
// goroutine, and answers it.
func (p *Proxy) waitInPlace(ex *exchange) {
	ctx := ex.r.Context()
	p.settle(ctx, ex, p.sched.Do(ctx, p.describe(ex), ex.forward))
}

// settleParked is settle for a parked request, which then lets its
// connection go.
func (p *Proxy) settleParked(ctx context.Context, ex *exchange, rw *park.Response, err error) {
	defer func() {
		if v := recover(); v != nil { // outside the scheduler's containment of fn: nobody else would catch it
			p.log.Error("parked request panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if rw.Status() == 0 && ctx.Err() == nil {
				writeError(rw, &apiError{Status: http.StatusInternalServerError, Type: "api_error",
					Message: "sluice hit an internal error handling this request; retry, and report it if it persists"})
			}
		}
		// Accounted before Finish sends the last buffered bytes, as
		// ServeHTTP accounts before net/http sends them.
		p.account(ex.r, ex.rec, rw.Status())
		rw.Finish()
	}()
	p.settle(ctx, ex, err)
}

// settle answers a windowed request whose passage through the scheduler
// ended with err, and counts how it ended; ctx ends when its client
// leaves.
func (p *Proxy) settle(ctx context.Context, ex *exchange, err error) {
	var tooLong *dispatch.WaitTooLongError
	switch {
	case errors.Is(err, dispatch.ErrQueueFull), errors.As(err, &tooLong):
		p.metrics.Shed.Inc()
	case errors.Is(err, dispatch.ErrDeadline):
		p.metrics.Deadlines.Inc()
	case ctx.Err() != nil:
		p.metrics.Departed.Inc()
	}
	ex.rec.retries = ex.retries
	ex.finish(ctx, err)
}

// errClientGone marks a client that left while its body was being read.
var errClientGone = &apiError{Status: 499, Type: "client_closed", Message: "client closed the request"}

// readBody reads the whole request body, up to limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apiError) {
	if r.ContentLength > limit {
		return nil, errTooLarge(limit)
	}
	// A body must arrive within bodyReadTimeout: a client that declares a
	// large body and sends it slowly must not hold memory and a handler
	// indefinitely. The deadline is lifted afterwards so that the server's
	// watch for a departing client is not cut short during a long stream.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	defer rc.SetReadDeadline(time.Time{})
	rd := http.MaxBytesReader(w, r.Body, limit)
	body, err := readAllOf(rd, r.ContentLength)
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return nil, errTooLarge(limit)
		case r.Context().Err() != nil:
			return nil, errClientGone
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, &apiError{Status: http.StatusRequestTimeout, Type: "invalid_request_error",
				Message: fmt.Sprintf("the request body did not arrive within %s; send it faster or make it smaller", bodyReadTimeout)}
		}
		return nil, &apiError{Status: http.StatusBadRequest, Type: "invalid_request_error",
			Message: "sluice could not read the request body (" + err.Error() + "); send a well-formed HTTP body"}
	}
	return body, nil
}

// readAllOf reads rd to the end. A body of a declared length up to 64 KB
// is read into a buffer of exactly that size, since a waiting request keeps
// its body: a 90-byte body costs 90 bytes, not a growing buffer's 768.
// Beyond 64 KB the declared length is trusted only up to a point: memory
// is committed as bytes arrive, not as a header promises them.
func readAllOf(rd io.Reader, declared int64) ([]byte, error) {
	if declared >= 0 && declared <= 64<<10 {
		body := make([]byte, declared)
		_, err := io.ReadFull(rd, body) // net/http's body ends at the declared length
		return body, err
	}
	var buf bytes.Buffer
	if declared > 0 {
		buf.Grow(64<<10 + 1) // +1: ReadFrom reads until EOF
	}
	_, err := buf.ReadFrom(rd)
	return buf.Bytes(), err
}

// bodyReadTimeout bounds how long a Messages request body may take to
// arrive: 32 MB at well under 1 MB/s.
const bodyReadTimeout = 60 * time.Second

// requestInfo is what sluice reads from a Messages body, for the access log
// and the metrics.
type requestInfo struct {
	Model  string `json:"model"`
	Stream bool   `json:"stream"`
}

// inspect checks that a Messages body is a JSON object and reads its model
// and stream flag. Everything else about it is the upstream's to judge, so
// that sluice never rejects a request the API would accept: a model or
// stream of the wrong type is the upstream's to refuse.
func inspect(body []byte) (requestInfo, *apiError) {
	var info requestInfo
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return info, errBadJSON("the body is empty")
	}
	if trimmed[0] != '{' {
		return info, errBadJSON("the body is not a JSON object")
	}
	// One pass validates and reads the two fields.
	if err := json.Unmarshal(trimmed, &info); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return requestInfo{}, errBadJSON("the body is not valid JSON")
		}
	}
	if len(info.Model) > 128 {
		info.Model = info.Model[:128] // bound what reaches the log
	}
	return info, nil
}

// exchange is one Messages request on its way through sluice.
type exchange struct {
	p       *Proxy
	w       http.ResponseWriter
	r       *http.Request
	body    []byte
	written bool // the response status has been sent
	retries int  // attempts after the first
	rec     *record
}

// forward sends the request upstream under ctx and relays the answer. m is
// the request's place in its wave, or nil on the plain path. On the windowed
// path a retryable failure is tried again in place (see again) as long as
// nothing has been written to the client.
func (ex *exchange) forward(ctx context.Context, m *dispatch.Member) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if m != nil {
		ex.rec.wave, ex.rec.queueWait = m.WaveID(), m.QueueWait()
		ex.p.metrics.SlotWait.Observe(m.SlotWait().Seconds())
		ex.p.metrics.QueueWait.Observe(m.QueueWait().Seconds())
	}
	start := time.Now()
	stream := "false"
	defer func() {
		ex.rec.upstreamTime = since(start)
		ex.p.metrics.UpstreamDuration.WithLabelValues(stream).Observe(time.Since(start).Seconds())
	}()
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		resp, err := ex.p.up.Do(ctx, ex.r, bytes.NewReader(ex.body), int64(len(ex.body)))
		if err == nil {
			ex.p.metrics.UpstreamTTFB.Observe(time.Since(sent).Seconds())
			ex.rec.upstreamID = resp.Header.Get("Request-Id")
		}
		if err != nil {
			if retried, rerr := ex.again(ctx, m, attempt, retry.CauseConnection, nil); retried {
				continue
			} else if rerr != nil {
				return rerr
			}
			return err
		}
		if m != nil {
			m.Settle(resp.StatusCode, resp.Header) // rate-limit holds learn from every answer
		}
		if isEventStream(resp.Header) {
			defer resp.Body.Close()
			// The wave deadline covers a stream up to its headers; from here on
			// the idle timeout governs.
			if m != nil && !m.LiftDeadline() {
				return dispatch.ErrDeadline
			}
			ex.written = true
			if m != nil {
				m.MarkBegun()
			}
			stream = "true"
			return ex.p.relayEvents(ctx, cancel, ex.w, resp)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody+1))
		resp.Body.Close()
		if err != nil {
			uerr := &upstream.Error{Upstream: ex.p.upstreamName(), Err: fmt.Errorf("read response body: %w", err)}
			if retried, rerr := ex.again(ctx, m, attempt, retry.CauseConnection, nil); retried {
				continue
			} else if rerr != nil {
				return rerr
			}
			return uerr
		}
		if len(data) > maxResponseBody {
			return &apiError{Status: http.StatusBadGateway, Type: "api_error",
				Message: fmt.Sprintf("the upstream's response exceeded %d MB; sluice did not relay it", maxResponseBody>>20)}
		}
		if cause, ok := retry.Retryable(resp.StatusCode, resp.Header); ok {
			if retried, rerr := ex.again(ctx, m, attempt, cause, resp.Header); retried {
				continue
			} else if rerr != nil {
				return rerr
			}
			// Giving up: the upstream's own answer, retry-after and all, goes
			// to the client so that its retry policy takes over.
		}
		h := ex.w.Header()
		upstream.CopyHeader(h, resp.Header)
		h.Set("Content-Length", strconv.Itoa(len(data)))
		ex.written = true
		if m != nil {
			m.MarkBegun()
		}
		// The slot is held while the answer is written: a client that stops
		// reading must not keep it past the idle timeout, as for streams.
		_ = http.NewResponseController(ex.w).SetWriteDeadline(time.Now().Add(ex.p.cfg.StreamIdleTimeout))
		ex.w.WriteHeader(resp.StatusCode)
		ex.w.Write(data)
		if resp.StatusCode == http.StatusOK {
			// After the write: the client has its answer before sluice
			// spends a decode on the metrics.
			ex.p.countMessageTokens(data)
		}
		return nil
	}
}

// again decides whether attempt, which failed with cause, is tried again,
// and if so waits its turn: it gives the slot back for the backoff (or the
// wait the upstream asked for in h) and rejoins the gate. It reports false
// to give up: on the plain path, which stays a pass-through; when the
// client left or the deadline passed; after RETRY_MAX_ATTEMPTS; when the
// wait would end past the wave deadline; or when the retry budget is spent.
// err is set when the wait itself was cut short (client gone, deadline).
func (ex *exchange) again(ctx context.Context, m *dispatch.Member, attempt int, cause retry.Cause, h http.Header) (bool, error) {
	if m == nil || ctx.Err() != nil || attempt >= ex.p.cfg.RetryMaxAttempts {
		return false, nil
	}
	wait := retry.Backoff(attempt-1, ex.p.rand())
	if h != nil {
		if d, ok := retry.After(h, time.Now()); ok {
			wait = d
		}
	}
	if time.Now().Add(wait).After(m.Deadline()) {
		return false, nil // no time left for it: let the client's policy decide
	}
	if !ex.p.budget.Spend() {
		ex.p.metrics.RetryBudgetSpent.Inc()
		return false, nil
	}
	ex.retries++
	ex.p.metrics.Retries.WithLabelValues(string(cause)).Inc()
	if err := m.Requeue(ctx, wait); err != nil {
		return false, err
	}
	return true, nil
}

// finish answers the client for a failure that happened before anything was
// written, or logs one that happened after; ctx ends when the client left.
func (ex *exchange) finish(ctx context.Context, err error) {
	if err == nil {
		return
	}
	if ex.written {
		// A stream that broke: relayEvents already told the client in-band.
		return
	}
	if ctx.Err() != nil {
		return // the client left: nobody to answer
	}
	writeError(ex.w, ex.p.mapError(err))
}

// describe is what the scheduler's policies know of ex's request.
func (p *Proxy) describe(ex *exchange) *request.Descriptor {
	return &request.Descriptor{Model: ex.rec.model, Stream: ex.rec.stream, Patience: p.clientPatience(ex.r)}
}

// clientPatience is how long the client will wait for this request in all,
// from the official SDKs' x-stainless-timeout header (whole seconds; absent
// or 0 when the client set no timeout), or zero when unknown or when
// ADMIT_BY_CLIENT_TIMEOUT is off.
func (p *Proxy) clientPatience(r *http.Request) time.Duration {
	if !p.cfg.AdmitByClientTimeout {
		return 0
	}
	n, err := strconv.Atoi(r.Header.Get("X-Stainless-Timeout"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// mapError is the one place where a failure becomes a client-visible error.
func (p *Proxy) mapError(err error) *apiError {
	var ae *apiError
	var ue *upstream.Error
	var pe *dispatch.PanicError
	var tooLong *dispatch.WaitTooLongError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, dispatch.ErrDeadline):
		return &apiError{Status: http.StatusGatewayTimeout, Type: "timeout_error",
			Message: fmt.Sprintf("sluice gave up after BATCH_TIMEOUT_S=%s, counted from the request's window flush, waiting for a concurrency slot and the upstream's response; retry later, or raise BATCH_TIMEOUT_S or BATCH_MAX_CONCURRENCY", p.cfg.Timeout)}
	case errors.Is(err, dispatch.ErrQueueFull):
		return &apiError{Status: 529, Type: "overloaded_error", RetryAfter: 1,
			Message: fmt.Sprintf("sluice is overloaded: BATCH_MAX_QUEUE=%d requests are already waiting for the upstream; retry after the retry-after delay", p.cfg.MaxQueue)}
	case errors.As(err, &tooLong):
		return &apiError{Status: 529, Type: "overloaded_error", RetryAfter: max(1, int(math.Ceil(tooLong.Expected.Seconds()))),
			Message: fmt.Sprintf("sluice is overloaded: this request would wait about %s for one of the BATCH_MAX_CONCURRENCY=%d slots, more than the client's own %s timeout (x-stainless-timeout) leaves for the call; retry after the retry-after delay",
				tooLong.Expected.Round(time.Millisecond), p.cfg.MaxConcurrency, tooLong.Patience)}
	case errors.Is(err, dispatch.ErrClosed):
		return &apiError{Status: 529, Type: "overloaded_error", RetryAfter: 1,
			Message: "sluice is shutting down and accepts no new requests; retry in a moment"}
	case errors.As(err, &ue):
		if ue.Dial {
			return &apiError{Status: http.StatusBadGateway, Type: "api_error",
				Message: fmt.Sprintf("sluice could not connect to the upstream %s (%v); the request was not sent. Check UPSTREAM_URL and that the upstream is reachable", ue.Upstream, ue.Err)}
		}
		return &apiError{Status: http.StatusBadGateway, Type: "api_error",
			Message: fmt.Sprintf("the connection to the upstream %s failed before a complete response (%v); the request may have reached it. Retry if it is safe to", ue.Upstream, ue.Err)}
	case errors.As(err, &pe):
		p.log.Error("request handler panicked", "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
		return &apiError{Status: http.StatusInternalServerError, Type: "api_error",
			Message: "sluice hit an internal error handling this request; retry, and report it if it persists"}
	}
	p.log.Error("unexpected failure", "err", err)
	return &apiError{Status: http.StatusBadGateway, Type: "api_error",
		Message: "sluice could not complete the request: " + err.Error()}
}

func (p *Proxy) upstreamName() string {
	b := p.up.Base()
	return b.Scheme + "://" + b.Host
}

func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && strings.EqualFold(mt, "text/event-stream")
}
