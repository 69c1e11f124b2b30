package dispatch

// The routing policy's face: which upstream key a member goes with.

// Routing chooses, for each member, the upstream key it will be sent
// with: as it leaves its wave, before its key's pacing, and again before
// each retry (so a retry can go to another key: failover). It keeps what
// it chose in a Note of its own, for the member's function to read.
// Config.Routing sets it; its methods are called on the request path and
// must not block.
type Routing interface {
	// Route chooses m's key. It returns the key's short name, whose
	// rate-limit buckets m then spends (m.Request().Upstream), and the
	// lane of the gate m waits in first (see gate.Lanes; 0: none).
	Route(m *Member) (key string, lane int)
	// End is m's passage ending, whichever way: what it held of its key
	// (its place in the key's load) is given back.
	End(m *Member)
}

// route has m's key chosen, if there is a routing policy, and readies its
// ticket for the key's lane.
func (s *Scheduler) route(m *Member) {
	if s.routing == nil {
		return
	}
	m.req.Upstream, m.ticket.Lane = s.routing.Route(m)
}
