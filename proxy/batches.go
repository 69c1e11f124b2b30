package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/upstream"
)

// resultsURLField finds "results_url":"..." in a batch object or a page of
// them. The API writes plain, unescaped URLs.
var resultsURLField = regexp.MustCompile(`("results_url"\s*:\s*")([^"\\]*)(")`)

// isBatchObjectResponse reports whether a relayed response carries Message
// Batch objects whose results_url sluice must rewrite: JSON from the batches
// endpoints other than the JSONL results themselves.
func isBatchObjectResponse(r *http.Request, resp *http.Response) bool {
	if !rewritesBatchObjects(r) || resp.Header.Get("Content-Encoding") != "" {
		return false
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "application/json"
}

// rewritesBatchObjects reports whether r's answer carries Message Batch
// objects: the batches endpoints other than the JSONL results.
func rewritesBatchObjects(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/v1/messages/batches") && !strings.HasSuffix(r.URL.Path, "/results")
}

// relayBatchObject relays a batch object with every results_url pointed at
// sluice itself, because the TypeScript and Python SDKs fetch results_url
// verbatim and must not bypass the proxy (or fail to reach the upstream's
// private address). The rest of the body is relayed byte for byte.
func (p *Proxy) relayBatchObject(w http.ResponseWriter, r *http.Request, resp *http.Response) {
	// Under STREAM_IDLE_TIMEOUT_S, as every relayed body is, and whole or
	// not at all: one cut at a bound would reach the client as a short,
	// broken JSON document.
	data, err := readUpstreamBody(resp, p.cfg.StreamIdleTimeout)
	if errors.Is(err, errResponseTooLarge) {
		apierror.WriteSluice(w, &apierror.Error{Status: http.StatusBadGateway, Type: "api_error",
			Message: fmt.Sprintf("the upstream's response exceeded %d MB; sluice did not relay it", maxResponseBody>>20)})
		return
	}
	if err != nil {
		apierror.WriteSluice(w, p.mapError(&upstream.Error{Upstream: p.upstreamName(), Err: err}))
		return
	}
	self := p.publicBase
	data = resultsURLField.ReplaceAllFunc(data, func(m []byte) []byte {
		parts := resultsURLField.FindSubmatch(m)
		rewritten := p.rewriteResultsURL(string(parts[2]), self)
		return bytes.Join([][]byte{parts[1], []byte(rewritten), parts[3]}, nil)
	})
	h := w.Header()
	upstream.CopyHeader(h, resp.Header)
	h.Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(resp.StatusCode)
	w.Write(data)
}

// rewriteResultsURL maps an upstream results URL onto sluice's own base: the
// API path (from /v1/ on) is kept, scheme, host and any upstream path prefix
// are replaced. A URL it cannot read is left alone.
func (p *Proxy) rewriteResultsURL(raw, self string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw
	}
	path := u.EscapedPath()
	i := strings.Index(path, "/v1/")
	if i < 0 {
		return raw
	}
	out := self + path[i:]
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out
}
