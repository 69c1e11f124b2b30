package route

// Trail is one request's way through the pool over its upstream attempts:
// the key it holds a place on now, and the keys that failed it before. A
// failover is written once, here, for both of the proxy's paths: the
// windowed scheduler's routing (Scheduling) keeps one per member, the
// plain path one per request.
type Trail struct {
	Key   *Key   // the key of its latest attempt; nil before one, or after Leave
	Why   Why    // why Key was chosen
	Tried []*Key // the keys that failed it, in order
	// Done says End gave Key's place in its load back: it is not routed
	// again.
	Done bool
}

// Leave moves t off its key, which failed it: its place in the key's
// load is given back, and the key is avoided from now on.
func (t *Trail) Leave(p *Pool) {
	if t.Key == nil {
		return
	}
	t.Tried = append(t.Tried, t.Key)
	p.Done(t.Key)
	t.Key = nil
}

// End gives t's place in its key's load back, once.
func (t *Trail) End(p *Pool) {
	if t.Key != nil && !t.Done {
		p.Done(t.Key)
	}
	t.Done = true
}
