package proxy

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/upstream"
)

// relay forwards any request that is not windowed (count_tokens, models,
// batches, unknown paths) at once, streaming the body both ways.
func (p *Proxy) relay(w http.ResponseWriter, r *http.Request) {
	limit := int64(maxMessagesBody)
	if strings.HasPrefix(r.URL.Path, "/v1/messages/batches") {
		limit = maxBatchesBody
	}
	if r.ContentLength > limit {
		writeError(w, errTooLarge(limit))
		return
	}
	if rewritesBatchObjects(r) {
		// sluice must read the batch objects to point results_url at itself,
		// so it asks the upstream for them uncompressed.
		r = r.Clone(r.Context())
		r.Header.Del("Accept-Encoding")
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	resp, err := p.up.Do(r.Context(), r, body, r.ContentLength)
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(w, errTooLarge(limit))
		case r.Context().Err() != nil:
			// the client left
		default:
			writeError(w, p.mapError(err))
		}
		return
	}
	defer resp.Body.Close()
	recordOf(r).upstreamID = resp.Header.Get("Request-Id")
	if isBatchObjectResponse(r, resp) {
		p.relayBatchObject(w, r, resp)
		return
	}
	upstream.CopyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	copyFlushing(w, resp.Body, p.cfg.StreamIdleTimeout)
}

// copyFlushing copies src to w, flushing after every read so that a slow
// body (results being produced, a stream) reaches the client as it comes.
// Each write must finish within idle, so that a client that stops reading
// releases the upstream connection.
func copyFlushing(w http.ResponseWriter, src io.Reader, idle time.Duration) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			rc.Flush()
		}
		if err != nil {
			return
		}
	}
}
