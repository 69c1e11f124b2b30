package proxy

import (
	"bytes"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/request"
)

// bulkBody reads a bulk submission's body before h sees it, as a Messages
// body is read: within the body timeout (408 past it), under
// BODY_BUDGET_MB in 64 KB steps as bytes arrive, counted against
// MAX_PENDING_CONNS until it is in. h then gets it whole, with its exact
// length: a client that trickles a body cannot hold a connection, a
// goroutine and a share of the bulk endpoint's own budget for as long as
// it likes.
func (p *Proxy) bulkBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.routes != nil {
			// Bulk batches go with the bulk key: the service stores the
			// credential the request carries, to poll its batches with.
			// Its requests stay the client's own: owned by the key it
			// sent (as a caller), not by the bulk key every client shares.
			if _, ok := request.CallerOf(r.Context()); !ok {
				if c := request.Tenant(r.Header); c != "" {
					r = r.WithContext(request.WithCaller(r.Context(), "client-key:"+c))
				}
			}
			if k := p.routes.BulkKey(); k != nil {
				if !k.Allows(inboundOf(r)) {
					apierror.WriteSluice(w, errBulkNotAllowed(inboundOf(r), k))
					return
				}
				k.Authorize(r.Header)
				recordOf(r).backend = k.Name
			}
		}
		if in := inboundOf(r); in != nil && in.Groups != nil {
			// A person signed in through the identity provider: their
			// groups' budgets bind what they submit (the bulk endpoint
			// has no descriptor to carry them). Their tenant is the
			// one the token names, as the Messages path's.
			r = r.WithContext(budget.WithMember(r.Context(), budget.Member{Tenant: in.Tenant, Groups: in.Groups}))
		}
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		body, ok := p.takeBody(w, r)
		if !ok {
			return
		}
		defer p.bodies.release(body.reserved)
		recordOf(r).bytesIn = int64(len(body.data))
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body.data)), int64(len(body.data))
		h.ServeHTTP(w, r)
	})
}
