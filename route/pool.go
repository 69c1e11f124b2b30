// Package route spreads requests over several upstream keys and backends
// behind one sluice: the config file's [[backends]], each with its keys
// (held by sluice), its cap and its weight. A Router chooses each
// request's key (router.go: by cache affinity, session, room and load; or
// in turn); the Pool keeps what every router reads of the keys: their
// health (health.go), their load, and the prompt prefixes each holds
// (affinity.go). Scheduling (scheduling.go) is the Router as the windowed
// scheduler's routing policy. Keys are secrets: a Key names itself by
// its backend's name and its place there, and by a short hash; its
// credential leaves only in the header of an upstream call.
package route

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/regfile"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/upstream"
)

// Backend is one upstream backend: where its calls go, and its keys.
type Backend struct {
	Name string
	Kind string // anthropic, bedrock, vertex or foundry
	// Client sends its calls: the API itself, or a cloud translating.
	Client upstream.Backend
	// Cap is each of its keys' calls in flight at most.
	Cap int
	// Weight is its keys' share when the least loaded is picked.
	Weight float64
	// Bulk says the bulk endpoint goes to its first key.
	Bulk bool
	Keys []*Key
}

// FirstParty says whether b speaks the Messages API itself, so that it
// can serve what no cloud does (/v1/models, the bulk endpoint).
func (b *Backend) FirstParty() bool {
	k, _ := config.KindOf(b.Kind)
	return k.FirstParty
}

// Key is one upstream credential of one backend, or a cloud backend's
// own credentials (which its Client holds).
type Key struct {
	Backend *Backend
	// Name is the backend's name and the key's place in it, from 1
	// ("primary/2"): what logs, metrics and the page say.
	Name string
	// Hash is a short hash of the credential (as request.Tenant makes
	// it), or for a cloud its name: whose rate-limit buckets a request
	// routed to it spends.
	Hash string
	// Lane is its lane in the gate (gate.Lanes), from 1.
	Lane int
	// index is its place among all keys, its bit in a prefix's key set.
	index int

	secret string

	pending atomic.Int64 // routed here and not yet ended
	health  health
	count   counts
	// firstBytes are its answers' latest times to first byte, and
	// answeredAt when it last sent an answer's headers (Unix ns).
	firstBytes firstBytes
	answeredAt atomic.Int64
}

// Authorize puts the key's credential on h, the headers of a call about
// to go to its backend, in place of whatever the client sent. A cloud's
// key puts none: its client signs the call itself.
func (k *Key) Authorize(h http.Header) {
	h.Del("Authorization")
	if k.secret == "" {
		h.Del("X-Api-Key")
		return
	}
	h.Set("X-Api-Key", k.secret)
}

// String is the key's name: never its credential.
func (k *Key) String() string { return k.Name }

// Pending is how many requests are routed to k and not yet ended.
func (k *Key) Pending() int { return int(k.pending.Load()) }

// load is k's pending requests against its share: lower is emptier.
func (k *Key) load() float64 {
	w := k.Backend.Weight
	if w <= 0 {
		w = 1
	}
	return float64(k.pending.Load()) / (float64(max(k.Backend.Cap, 1)) * w)
}

// full reports whether k has as many pending as its cap.
func (k *Key) full() bool { return int(k.pending.Load()) >= k.Backend.Cap }

// Spec is one backend as the configuration gives it; Keys are references
// (env:NAME or file:PATH) that New reads.
type Spec struct {
	Name   string
	Kind   string
	Client upstream.Backend
	Keys   []string
	Cap    int
	Weight float64
	Bulk   bool
}

// Room is what a router asks of the keys' rate-limit buckets: when a cost
// would fit in a key's (pace.Buckets, or the fleet's shared ones).
type Room interface {
	FitsAt(key string, c pace.Cost, now time.Time) time.Time
}

// Pool is the backends and their keys, with what is known of each.
type Pool struct {
	Backends []*Backend
	Keys     []*Key
	room     Room
	byName   map[string]*Backend
	affinity affinity
	sessions sessions
	share    Share // nil: this replica alone (see share.go)
	// AffinityWait is how much longer than the soonest elsewhere a
	// request waits for the key that holds its prefix or its session
	// before it goes elsewhere.
	AffinityWait time.Duration
	// FirstByteFloor is the shortest a key's learnt bound on the wait for
	// an answer's headers is (see FirstByteBound).
	FirstByteFloor time.Duration
}

// DefaultAffinityWait is Pool.AffinityWait's default.
const DefaultAffinityWait = time.Second

// New builds the pool of specs, reading each key with getenv (os.Getenv
// if nil) or from its file. room is nil when nothing paces the keys: each
// then has room at once. The errors name the backend and the reference,
// never a key.
func New(specs []Spec, room Room, getenv func(string) string) (*Pool, error) {
	if len(specs) == 0 {
		return nil, errors.New("route: no backends")
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	p := &Pool{room: room, byName: map[string]*Backend{}, AffinityWait: DefaultAffinityWait, FirstByteFloor: DefaultFirstByteFloor}
	p.affinity.init()
	p.sessions.init()
	seen := map[string]string{}
	for _, s := range specs {
		if s.Client == nil {
			return nil, fmt.Errorf("route: backend %s has no client", s.Name)
		}
		b := &Backend{Name: s.Name, Kind: s.Kind, Client: s.Client, Cap: s.Cap, Weight: s.Weight, Bulk: s.Bulk}
		if b.Cap < 1 {
			return nil, fmt.Errorf("route: backend %s: a cap of %d", s.Name, s.Cap)
		}
		refs := s.Keys
		if len(refs) == 0 {
			refs = []string{""} // a cloud: its client holds the credentials
		}
		for i, ref := range refs {
			k := &Key{Backend: b, Name: s.Name + "/" + strconv.Itoa(i+1), index: len(p.Keys), Lane: len(p.Keys) + 1}
			if ref != "" {
				secret, err := readKey(ref, getenv)
				if err != nil {
					return nil, fmt.Errorf("route: backend %s, key %d (%s): %w", s.Name, i+1, showRef(ref), err)
				}
				k.secret = secret
				k.Hash = request.Tenant(http.Header{"X-Api-Key": {secret}})
				if other, ok := seen[k.Hash]; ok {
					return nil, fmt.Errorf("route: backend %s, key %d (%s) is the same key as %s: each key once, or its limits are counted twice", s.Name, i+1, showRef(ref), other)
				}
				seen[k.Hash] = k.Name
			} else {
				k.Hash = "backend:" + k.Name
			}
			b.Keys = append(b.Keys, k)
			p.Keys = append(p.Keys, k)
		}
		if len(p.Keys) > 64 {
			return nil, errors.New("route: more than 64 keys")
		}
		p.Backends = append(p.Backends, b)
		p.byName[b.Name] = b
	}
	return p, nil
}

// maxKeyBytes bounds what is read of a key file.
const maxKeyBytes = 16 << 10

// showRef is ref for an error: a file's path, or an environment
// variable's name when it is one; anything else after env: may be a key
// pasted where its variable's name belongs, and is not shown.
func showRef(ref string) string {
	if kind, name, _ := strings.Cut(ref, ":"); kind == "env" && !isEnvName(name) {
		return fmt.Sprintf("env: and %d characters, not shown", len(name))
	}
	return ref
}

// isEnvName reports whether s is a name a shell gives a variable: letters,
// digits and _, not starting with a digit. A key (sk-ant-...) is not one.
func isEnvName(s string) bool {
	if s == "" || len(s) > 128 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range []byte(s) {
		if !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// readKey reads the key ref names: env:NAME or file:PATH.
func readKey(ref string, getenv func(string) string) (string, error) {
	kind, name, _ := strings.Cut(ref, ":")
	var v string
	switch kind {
	case "env":
		if !isEnvName(name) {
			return "", errors.New("what follows env: is not a variable name (a key pasted in? name the environment variable that holds it, never the key)")
		}
		v = getenv(name)
		if v == "" {
			return "", errors.New("the environment variable is unset or empty")
		}
	case "file":
		// Only a regular file (through any symlinks, as mounted secrets
		// are): opening a FIFO would wait for a writer, holding the start.
		f, err := regfile.Open(name)
		if err != nil {
			return "", fmt.Errorf("read the key file: %w", errors.Unwrap(err))
		}
		defer f.Close()
		b := make([]byte, maxKeyBytes+1)
		n, _ := f.Read(b)
		if n > maxKeyBytes {
			return "", errors.New("the key file is over 16 KB: not a key")
		}
		v = string(b[:n])
	default:
		return "", errors.New(`want "env:NAME" or "file:PATH"`)
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", errors.New("the key is empty")
	}
	if strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", errors.New("the key holds a control character (a line break inside the file?); it must be one line")
	}
	return v, nil
}

// Backend is the backend named name; nil if there is none.
func (p *Pool) Backend(name string) *Backend { return p.byName[name] }

// BulkKey is the key the bulk endpoint's batches go with: the first key
// of the backend that says bulk, else of the first anthropic backend;
// nil if there is none (only clouds, which take no batches).
func (p *Pool) BulkKey() *Key {
	for _, b := range p.Backends {
		if b.Bulk {
			return b.Keys[0]
		}
	}
	for _, b := range p.Backends {
		if b.FirstParty() {
			return b.Keys[0]
		}
	}
	return nil
}

// Allows reports whether a request of the inbound key in (nil: none)
// may go to some key of the pool.
func (p *Pool) Allows(in *request.Inbound) bool {
	r := request.Descriptor{Inbound: in}
	for _, k := range p.Keys {
		if allowed(&r, k) {
			return true
		}
	}
	return false
}

// Allows reports whether a request of the inbound key in (nil: none)
// may go with k: the bulk key, say, which no router chose.
func (k *Key) Allows(in *request.Inbound) bool {
	return allowed(&request.Descriptor{Inbound: in}, k)
}

// allowed reports whether r may go to k: an inbound key limited to some
// backends goes to those only.
func allowed(r *request.Descriptor, k *Key) bool {
	if r == nil || r.Inbound == nil || r.Inbound.Backends == nil {
		return true
	}
	for _, name := range r.Inbound.Backends {
		if name == k.Backend.Name {
			return true
		}
	}
	return false
}
