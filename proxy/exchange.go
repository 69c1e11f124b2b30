package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/cachewhy"
	"github.com/sluicehq/sluice/park"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/route"
	"github.com/sluicehq/sluice/upstream"
)

// exchange is one Messages request on its way through sluice.
type exchange struct {
	p       *Proxy
	w       http.ResponseWriter
	r       *http.Request
	body    heldBody
	rec     *record
	retries int // attempts after the first

	// What forward leaves for complete. At most one is set.
	reply *reply      // a whole answer, written once the slot is given back
	out   *streamPipe // a stream, being written to the client already
	// last is the latest retryable answer from the upstream: when sluice
	// runs out of time to retry, the client gets it rather than a timeout
	// of sluice's own for a wait the upstream caused.
	last *reply
	desc request.Descriptor // what the policies know of the request
	// why is what would explain a cache write of its answer (see
	// cachewhy.go).
	why cachewhy.Finding
	// turn is its hold on the upstream once its answer is being fetched
	// (turn.go): its answer's usage goes back to the turn's policies.
	turn turn
	// plain is the turn of a request on the plain path.
	plain plainTurn
	// tenant is the tenant the scheduler counts the request under (the
	// request's, or tenants.OtherTenant); "" on the plain path.
	tenant string
	// streamed is the body sent upstream instead of body's when a
	// non-streaming request leads a cold prefix (see reassemble.go).
	streamed []byte
	sent     time.Time // when the latest upstream attempt was sent
	// sending is the body the latest attempt sent, what its transport
	// holds until its answer ends (see letGoOfBody).
	sending *upstream.Body
	// cancelCall cancels the context of forward's upstream call, with a
	// cause: errUpstreamTimeout or errHeadersLate (see headerWatch). An
	// attempt cut for late headers is followed by one under a new context,
	// and cancelCall is then that one's (see fetch).
	cancelCall context.CancelCauseFunc
	// watch bounds its first attempt's wait for headers (see attempt).
	watch headerWatch
	// serving lists the request among those Abort cuts (see begin).
	serving inFlight
	// key is the backend key of its latest upstream attempt, when the
	// config file declares backends (see routing.go).
	key *route.Key
	// parked is the request's connection, taken over while it waits (see
	// waitParked); nil when it waits in place.
	parked *park.Response
}

// reply is a whole upstream answer, read while the request held its slot.
type reply struct {
	status int
	header http.Header
	data   []byte
	// counted says its usage was counted already, in the slot (see
	// forward), not to be counted again after the write.
	counted bool
}
