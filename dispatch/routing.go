package dispatch

// The routing policy's face: which upstream key a member goes with.

// Routing chooses, for each member, the upstream key it will be sent
// with: as it leaves its wave, before its key's pacing, and again before
// each retry (so a retry can go to another key: failover). It keeps what
// it chose in a Note of its own, for the member's function to read.
// Config.Routing sets it; its methods are called on the request path and
// must not block.
type Routing interface {
	// Route chooses m's key (see Routed).
	Route(m *Member) Routed
	// End is m's passage ending, whichever way: what it held of its key
	// (its place in the key's load) is given back.
	End(m *Member)
}

// Routed is a routing policy's choice for a member.
type Routed struct {
	// Key is the key's short name, whose rate-limit buckets the member
	// then spends (m.Request().Upstream).
	Key string
	// Lane is the lane of the gate the member waits in first (see
	// gate.Lanes; 0: none).
	Lane int
	// Cold says the key holds none of the member's prompt prefixes: the
	// pacing then counts none of its prompt as read from the cache,
	// whatever the cache-aware release found (its registry is one for
	// every key; a cache is per key).
	Cold bool
}

// route has m's key chosen, if there is a routing policy, and readies its
// ticket for the key's lane.
func (s *Scheduler) route(m *Member) {
	if s.routing == nil {
		return
	}
	r := s.routing.Route(m)
	m.req.Upstream, m.ticket.Lane, m.keyCold = r.Key, r.Lane, r.Cold
}
