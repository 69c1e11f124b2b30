package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/upstream"
)

// relay forwards any request that is not windowed (count_tokens, models,
// batches, unknown paths) at once, streaming the body both ways. The
// client's body must arrive within its read timeout, the upstream's
// headers within UPSTREAM_TIMEOUT_S, and its body may go silent for no
// longer than STREAM_IDLE_TIMEOUT_S.
func (p *Proxy) relay(w http.ResponseWriter, r *http.Request) {
	if p.budgets != nil && r.Method == http.MethodPost && r.URL.Path == "/v1/messages/batches" {
		p.relayBatchCreate(w, r) // a batch spends: its budget holds its estimate
		return
	}
	p.relayTo(w, r)
}

// relayTo is relay's relaying, for every path.
func (p *Proxy) relayTo(w http.ResponseWriter, r *http.Request) {
	dropGatewayIdentity(r.Header)
	limit, timeout := int64(maxMessagesBody), p.bodyTimeout
	if strings.HasPrefix(r.URL.Path, "/v1/messages/batches") {
		limit, timeout = maxBatchesBody, p.batchBodyTimeout
	}
	if r.ContentLength > limit {
		apierror.WriteSluice(w, closing(w, errTooLarge(limit)))
		return
	}
	if id, list, ok := modelsCall(r); ok && p.answersModelsItself(r) {
		p.serveModelTable(w, r, id, list)
		return
	}
	filterModels := filtersModelList(r)
	if rewritesBatchObjects(r) || filterModels || p.countsResults(r) {
		// sluice must read the batch objects to point results_url at itself
		// (a held batch's results to count them, the model list to show a
		// key only its models), so it asks the upstream for them
		// uncompressed.
		r = r.Clone(r.Context())
		r.Header.Del("Accept-Encoding")
	}
	rc := http.NewResponseController(w)
	var body *watchedBody
	var in io.Reader = http.NoBody
	if r.ContentLength != 0 {
		// A body still arriving counts against MAX_PENDING_CONNS, as a
		// Messages body does.
		if !p.pendingConns.take(p.cfg.MaxPendingConns) {
			p.metrics.Shed.Inc()
			apierror.WriteSluice(w, closing(w, errTooManyPending))
			return
		}

		_ = rc.SetReadDeadline(time.Now().Add(timeout))
		body = &watchedBody{r: http.MaxBytesReader(w, r.Body, limit)}
		in = body
	}
	if body != nil {
		defer func() { recordOf(r).bytesIn = body.read() }()
	}
	ctx, stop := withUpstreamTimeout(r.Context(), p.cfg.UpstreamTimeout)
	out := r
	var span trace.Span // the upstream call's, up to its headers; nil when tracing is off
	if p.tracer != nil {
		ctx, span, out = p.startAttemptSpan(ctx, recordOf(r), r, 0)
	}
	client, done, refused := p.relayBackend(out)
	if client == nil {
		stop()
		apierror.WriteSluice(w, refused)
		return
	}
	resp, err := client.Do(ctx, out, in, r.ContentLength)
	done()
	stop()
	if span != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		endAttemptSpan(span, status, "", err != nil)
	}
	if body != nil {
		p.pendingConns.give() // the body is in, or it never will be
		if body.done() {
			_ = rc.SetReadDeadline(time.Time{}) // the whole body is in
		} else {
			// The upstream answered before reading all of it: what is left
			// of it on the connection cannot be told from a next request.
			w.Header().Set("Connection", "close")
		}
	}
	if err != nil {
		if body != nil {
			if berr := body.failure(); berr != nil {
				if aerr := bodyReadError(r, berr, limit, timeout, p.bodies); aerr != errClientGone {
					apierror.WriteSluice(w, closing(w, aerr))
				}
				return
			}
		}
		if r.Context().Err() == nil {
			apierror.WriteSluice(w, p.mapError(p.upstreamFailure(ctx, err)))
		}
		return
	}
	defer resp.Body.Close()
	recordOf(r).upstreamID = resp.Header.Get("Request-Id")
	if filterModels && resp.StatusCode == http.StatusOK {
		p.relayModelList(w, inboundOf(r), resp)
		return
	}
	if isBatchObjectResponse(r, resp) {
		p.relayBatchObject(w, r, resp)
		return
	}
	upstream.CopyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	src := resp.Body
	if id, ok := batchResultsID(r); ok && p.budgets != nil && resp.StatusCode == http.StatusOK && resp.Header.Get("Content-Encoding") == "" {
		if h := p.batchHolds.take(id); h != nil {
			// Counted once, by this reading; the holds go back after it.
			src = &resultsCounter{ReadCloser: resp.Body, p: p, hold: h}
			defer h.release()
		}
	}
	copyFlushing(w, src, p.cfg.StreamIdleTimeout)
}

// watchedBody is a client's request body on its way upstream, remembering
// how its reading ended: the transport reports only that the request
// failed, not whether the client's body was at fault.
type watchedBody struct {
	r io.Reader

	mu  sync.Mutex
	n   int64 // bytes read, for the access line
	eof bool
	err error
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.mu.Lock()
	b.n += int64(n)
	if err == io.EOF {
		b.eof = true
	} else if err != nil && b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	return n, err
}

// read is how many bytes of the body have been read so far.
func (b *watchedBody) read() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

func (b *watchedBody) done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof
}

// failure is the error the body's reading ended with, if it failed.
func (b *watchedBody) failure() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// copyFlushing copies src to w, flushing after every read so that a slow
// body (results being produced, a stream) reaches the client as it comes.
// Each write must finish within idle, so that a client that stops reading
// releases the upstream connection; and src is closed when it sends
// nothing for idle.
func copyFlushing(w http.ResponseWriter, src io.ReadCloser, idle time.Duration) {
	rc := http.NewResponseController(w)
	watchdog := time.AfterFunc(idle, func() { src.Close() })
	defer watchdog.Stop()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			watchdog.Stop()
			_ = rc.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
			watchdog.Reset(idle)
		}
		if err != nil {
			return
		}
	}
}
