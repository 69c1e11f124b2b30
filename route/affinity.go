package route

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/request"
)

// What the pool knows of where prompts are cached: the keys each prompt
// prefix was written on (or is being written on), and the key each
// session last went to. Caches are per organisation and workspace, so a
// prefix written with one key is read only with keys of the same one; the
// pool counts each key apart, which is right for keys of different
// workspaces and only cautious for keys of one.

// maxRemembered bounds each map; past it, expired entries go first, then
// any.
const maxRemembered = 1 << 16

// sessionTTL is how long a session is remembered after its last request:
// a conversation idle longer has lost its 5-minute cache anyway, and a
// 1-hour one is found by its prefix.
const sessionTTL = 10 * time.Minute

type prefixHolders struct {
	keys  uint64 // a bit per key (Key.index)
	until time.Time
}

type affinity struct {
	mu sync.Mutex
	m  map[uint64]prefixHolders
}

func (a *affinity) init() { a.m = make(map[uint64]prefixHolders) }

// readsOf is the prefixes r may read, the shortest first: its
// breakpoints' and those of their lookback windows, as the API looks back
// for an entry; its breakpoints' when it has no reads.
func readsOf(r *request.Descriptor) []request.Prefix {
	if len(r.Reads) > 0 {
		return r.Reads
	}
	return r.Prefixes
}

// holders is the set of keys that hold ps's longest prefix held anywhere,
// and that prefix's tokens; 0 if none holds any.
func (a *affinity) holders(ps []request.Prefix, now time.Time) (uint64, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		if h, ok := a.m[ps[i].Key]; ok && h.until.After(now) {
			return h.keys, ps[i].Tokens
		}
	}
	return 0, 0
}

// prefixTTL is a prefix held until a time: what replicas tell each other.
type prefixTTL struct {
	key   uint64
	until time.Time
}

// wrote notes that k holds (or is writing) every prefix of ps, for their
// TTL from now, and returns them with their ends, for the other replicas.
func (a *affinity) wrote(ps []request.Prefix, k *Key, now time.Time) []prefixTTL {
	if len(ps) == 0 {
		return nil
	}
	out := make([]prefixTTL, 0, len(ps))
	for _, p := range ps {
		ttl := p.TTL
		if ttl <= 0 {
			ttl = 5 * time.Minute
		}
		out = append(out, prefixTTL{p.Key, now.Add(ttl)})
	}
	a.hold(out, k)
	return out
}

// hold notes that k holds each prefix of ps until its end.
func (a *affinity) hold(ps []prefixTTL, k *Key) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range ps {
		h, ok := a.m[p.key]
		if !ok {
			a.makeRoom(p.until)
		}
		if h.until.Before(p.until) {
			if !h.until.After(time.Now()) {
				h.keys = 0 // expired: whoever held it holds it no more
			}
			h.until = p.until
		}
		h.keys |= 1 << k.index
		a.m[p.key] = h
	}
}

// makeRoom drops entries when the map is full: the expired ones, then
// others, down to seven eighths of the bound, so that a flood of new
// prefixes pays one sweep per eighth of the map, not one per prefix.
// a.mu is held.
func (a *affinity) makeRoom(time.Time) {
	if len(a.m) < maxRemembered {
		return
	}
	now := time.Now()
	for key, h := range a.m {
		if !h.until.After(now) {
			delete(a.m, key)
		}
	}
	for key := range a.m {
		if len(a.m) <= maxRemembered*7/8 {
			break
		}
		delete(a.m, key)
	}
}

type sessionKey struct {
	key   *Key
	until time.Time
}

type sessions struct {
	mu sync.Mutex
	m  map[string]sessionKey
}

func (s *sessions) init() { s.m = make(map[string]sessionKey) }

// of is the key session last went to, if it is remembered.
func (s *sessions) of(session string, now time.Time) *Key {
	if session == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[session]; ok && e.until.After(now) {
		return e.key
	}
	return nil
}

// went notes that session went to k.
func (s *sessions) went(session string, k *Key, now time.Time) {
	if session == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[session]; !ok && len(s.m) >= maxRemembered {
		// As affinity.makeRoom: the expired, then others, to 7/8.
		for name, e := range s.m {
			if !e.until.After(now) || len(s.m) > maxRemembered*7/8 {
				delete(s.m, name)
			}
		}
	}
	s.m[session] = sessionKey{key: k, until: now.Add(sessionTTL)}
}
