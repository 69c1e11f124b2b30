package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/upstream"
)

// Routing over the config file's [[backends]] (package route): which
// backend and key each upstream call goes with. On the windowed path the
// scheduler routes each member as it leaves its wave (route.Scheduling);
// here the proxy reads that choice, routes the plain path and the relayed
// calls itself, puts the key's credential on the call, and tells the pool
// how each call went. Without backends none of this runs.

// sessionHeader is Claude Code's session id: its requests of one
// conversation carry the same one.
const sessionHeader = "X-Claude-Code-Session-Id"

// sessionOf is what names r's conversation for the router: Claude Code's
// session header, else metadata.user_id, else the tenant. A session is
// its tenant's: another tenant sending the same id (a client sets it as
// it likes) names a session of its own, and cannot move this one.
func sessionOf(h http.Header, d *request.Descriptor) string {
	if s := h.Get(sessionHeader); s != "" {
		if len(s) > request.MaxUserID {
			s = s[:request.MaxUserID]
		}
		return "s:" + d.Tenant + "\x00" + s
	}
	if d.UserID != "" {
		return "u:" + d.Tenant + "\x00" + d.UserID
	}
	if d.Tenant != "" {
		return "t:" + d.Tenant
	}
	return ""
}

// backendFor is the client and key of ex's next upstream attempt in t:
// the key t routes it to (turn.route). With no backends configured it is
// the one upstream, and no key. A nil client: ex's request may use no
// backend of this sluice.
func (ex *exchange) backendFor(t turn) (upstream.Backend, *route.Key) {
	p := ex.p
	if p.routes == nil {
		return p.up, nil
	}
	k := t.route(ex)
	ex.key = k
	if k == nil {
		return nil, nil
	}
	ex.rec.backend = k.Name
	return k.Backend.Client, k
}

// failoverNow reports whether a failed attempt of ex is better tried at
// once on another key than waited for on its own: routing is on, and
// another key it may use is healthy and has room about now.
func (ex *exchange) failoverNow() bool {
	return ex.p.routes != nil && ex.key != nil && ex.p.routes.Elsewhere(&ex.desc, ex.key, time.Now())
}

// errNoBackend answers a request whose inbound key may use none of this
// sluice's backends.
func errNoBackend(in *request.Inbound) *apierror.Error {
	if in == nil {
		return &apierror.Error{Status: http.StatusServiceUnavailable, Type: "api_error",
			Message: "no backend of this sluice serves this request; ask whoever runs this sluice to check its [[backends]]"}
	}
	names, name := strings.Join(in.Backends, ", "), in.Name
	return &apierror.Error{Status: http.StatusForbidden, Type: "permission_error",
		Message: fmt.Sprintf("the sluice key %q may use only the backends %s, and this sluice has none of them; ask whoever runs this sluice to fix the key's backends in the keys file", name, names)}
}

// errNoBatchBackend answers a Message Batches request on a sluice whose
// backends are all clouds, which offer no batches (docs/clouds.md).
var errNoBatchBackend = &apierror.Error{Status: http.StatusBadRequest, Type: "invalid_request_error",
	Message: "Message Batches need an Anthropic backend (the first-party API), and this sluice has only cloud backends (Bedrock, Vertex), which offer no batches: send batches through a sluice with an Anthropic backend, or send each request to /v1/messages"}

// errBulkNotAllowed answers a batch or bulk request of an inbound key
// that may not use the backend of the bulk key, k, which batches go with.
func errBulkNotAllowed(in *request.Inbound, k *route.Key) *apierror.Error {
	return &apierror.Error{Status: http.StatusForbidden, Type: "permission_error",
		Message: fmt.Sprintf("the sluice key %q may use only the backends %s; batches go with backend %s, which it may not use: send batches with another sluice key, or ask whoever runs this sluice to add %s to the key's backends",
			in.Name, strings.Join(in.Backends, ", "), k.Backend.Name, k.Backend.Name)}
}

// relayBackend is the client for a relayed call r (count_tokens, models,
// batches), with the key's credential put on r: batches go with the bulk
// key, since a batch is found again only with a key of the organisation
// that made it; the rest with the least loaded key r may use. done gives
// the key's load back. A nil client: r may use no backend, as refused
// says.
func (p *Proxy) relayBackend(r *http.Request) (client upstream.Backend, done func(), refused *apierror.Error) {
	if p.routes == nil {
		return p.up, func() {}, nil
	}
	var k *route.Key
	done = func() {}
	if strings.HasPrefix(r.URL.Path, "/v1/messages/batches") {
		if k = p.routes.BulkKey(); k == nil {
			return nil, func() {}, errNoBatchBackend
		} else if !k.Allows(inboundOf(r)) {
			return nil, func() {}, errBulkNotAllowed(inboundOf(r), k)
		}
	} else if k = firstParty(p.routes, r); k == nil {
		if k, _ = p.routes.Route(p.router, &request.Descriptor{Inbound: inboundOf(r)}, nil, time.Now()); k != nil {
			done = func() { p.routes.Done(k) }
		}
	}
	if k == nil {
		return nil, nil, errNoBackend(inboundOf(r))
	}
	k.Authorize(r.Header)
	recordOf(r).backend = k.Name
	return k.Backend.Client, done, nil
}

// firstParty is the key for a relayed call r that a cloud backend does
// not serve (/v1/models; anything but count_tokens): the first healthy
// first-party key r may use, else the first such; nil for count_tokens,
// or when there is none (the pool's choice then answers).
func firstParty(pool *route.Pool, r *http.Request) *route.Key {
	if strings.TrimSuffix(r.URL.Path, "/") == "/v1/messages/count_tokens" {
		return nil
	}
	var first *route.Key
	now := time.Now()
	for _, k := range pool.Keys {
		if !k.Backend.FirstParty() || !k.Allows(inboundOf(r)) {
			continue
		}
		if k.Healthy(now) {
			return k
		}
		if first == nil {
			first = k
		}
	}
	return first
}

// Backends are the config file's backend keys as the page shows them, in
// its order; nil without backends.
func (p *Proxy) Backends() []route.Row {
	if p.routes == nil {
		return nil
	}
	return p.routes.Rows()
}
