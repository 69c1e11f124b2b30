package route

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/dispatch"
)

// Scheduling is a Router as the windowed scheduler's routing policy
// (dispatch.Routing): each member is routed as it leaves its wave, and
// again before each retry, avoiding the keys that failed it.
type Scheduling struct {
	Pool   *Pool
	Router Router

	// mu guards the members' records: a member may be routed (a
	// cache-aware follower let go) on one goroutine as it ends (its
	// client gone) on another.
	mu sync.Mutex
}

var _ dispatch.Routing = (*Scheduling)(nil)

// routedNote is a member's Trail: its key, and the keys it tried before.
var routedNote = dispatch.NewNote[Trail]()

// Route chooses m's key (see dispatch.Routing). A request with prompt
// prefixes routed to a key that held none of them is cold there.
func (s *Scheduling) Route(m *dispatch.Member) dispatch.Routed {
	s.mu.Lock()
	n := routedNote.Make(m)
	if n.Done {
		s.mu.Unlock()
		return dispatch.Routed{} // it ended as it was let go: nowhere to go
	}
	n.Leave(s.Pool) // tried again: its last key failed it, or held it
	tried := n.Tried
	s.mu.Unlock()
	r := m.Request()
	k, why, held := s.Pool.route(s.Router, r, tried, time.Now())
	if k == nil {
		// Nothing it may use: the proxy refuses such a request before it
		// waits (see Pool.Allows), so this is a pool changed under it.
		return dispatch.Routed{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n.Done { // it ended while it was being routed
		s.Pool.Done(k)
		return dispatch.Routed{}
	}
	n.Key, n.Why = k, why
	return dispatch.Routed{Key: k.Hash, Lane: k.Lane, Cold: len(r.Prefixes) > 0 && !held}
}

// End gives m's place in its key's load back, once; a member that ends
// before it is routed is not routed after.
func (s *Scheduling) End(m *dispatch.Member) {
	s.mu.Lock()
	defer s.mu.Unlock()
	routedNote.Make(m).End(s.Pool)
}

// KeyOf is the key m was routed to, and why, and how many keys it failed
// over from; nil before it was routed.
func KeyOf(m *dispatch.Member) (*Key, Why, int) {
	n := routedNote.Peek(m)
	if n == nil {
		return nil, ByRoom, 0
	}
	return n.Key, n.Why, len(n.Tried)
}
