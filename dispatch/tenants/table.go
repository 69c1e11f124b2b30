// Package tenants is the tenant policy (TENANT_FROM, TENANT_MAX,
// TENANT_WEIGHTS, TENANT_MAX_CONCURRENT, TENANT_MAX_WAITING): a
// dispatch.Tenants that names each request's tenant and class, tracks a
// bounded number of tenants and counts what each has waiting and in
// flight, sheds a tenant past its limit with a dispatch.TenantFullError,
// and fills the gate ticket the fair order reads. Under
// TENANT_FROM=gateway the tenant is the developer Anthropic's gateway
// names (gatewayuser.go).
package tenants

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
)

// Where a request's tenant comes from (TENANT_FROM).
const (
	TenantFromKey      = "key"      // the credential it brings: its short hash (request.Descriptor.Tenant)
	TenantFromHeader   = "header"   // the x-sluice-tenant header
	TenantFromMetadata = "metadata" // the body's metadata.user_id
	TenantFromInbound  = "inbound"  // the inbound sluice key's tenant
	TenantFromSession  = "session"  // Claude Code's session: its header, else metadata.user_id's session_id
	TenantFromGateway  = "gateway"  // the developer Anthropic's gateway signed in: its identity headers
)

// SessionHeader is the header Claude Code names its session with; the
// same id is the session_id of the JSON string it sends as
// metadata.user_id.
const SessionHeader = "X-Claude-Code-Session-Id"

// The headers a client names its tenant (under TENANT_FROM=header) and
// its priority class (request.Class's name) with.
const (
	TenantHeader   = "X-Sluice-Tenant"
	PriorityHeader = "X-Sluice-Priority"
)

// OtherTenant is the tenant shared by everyone past Config.Max.
const OtherTenant = "other"

// maxTenantName bounds a tenant name taken from a header, as
// request.MaxUserID bounds one from the body.
const maxTenantName = request.MaxUserID

// Config is the tenant policy.
type Config struct {
	From string // TENANT_FROM; "" means key
	// Max is how many distinct tenants are tracked at once (TENANT_MAX);
	// past it a new tenant takes the place of one with nothing waiting
	// or in flight, or, when every one is busy, shares OtherTenant.
	Max int
	// Weights are tenants' shares in the fair order (TENANT_WEIGHTS); a
	// tenant not named has 1, or its inbound key's weight.
	Weights map[string]float64
	// MaxConcurrent is how many upstream calls one tenant may have at once
	// (TENANT_MAX_CONCURRENT; 0: no limit, and an inbound key's own limit
	// wins). The gate's order enforces it (gate.Fair); others ignore it.
	MaxConcurrent int
	// MaxWaiting is how many requests one tenant may have waiting (in
	// windows or for a slot) before its next ones are shed
	// (TENANT_MAX_WAITING; 0: no limit; an inbound key's own limit wins).
	MaxWaiting int
}

// Table is today's tenant policy (dispatch.Tenants) and its accounting: it
// names each request's tenant and class (Identify), keeps per tenant how
// many requests wait and how many hold a slot, sheds a tenant's request
// past its MaxWaiting with a *dispatch.TenantFullError, and fills each gate
// ticket's key, cost, class, weight and limit. At most Max tenants are
// tracked at once, so that memory and the metrics' labels stay bounded
// whoever the clients say they are.
type Table struct {
	cfg Config

	mu    sync.Mutex
	known map[string]*tenant
	other *tenant
	// keyWaiting is, per inbound key whose limits bind apart from its
	// requests' tenants (bindsKey), how many of its requests wait: at
	// most the keys of the keys file.
	keyWaiting map[string]int
	// idle lists the tracked tenants with nothing waiting or in flight,
	// the longest idle first: the ones a new tenant may replace.
	idleHead, idleTail *tenant
}

var _ dispatch.Tenants = (*Table)(nil)

// tenant is one tracked tenant's counts, and the Tenant its requests
// are entered as. Guarded by tenants.Table.mu.
type tenant struct {
	name              string
	waiting, inFlight int
	shed, served      int64
	tokens            int64
	idle              bool
	prev, next        *tenant // in the idle list
}

// DefaultMaxTenants is TENANT_MAX's default, and a Config's when
// its Max is below 1.
const DefaultMaxTenants = 100

// New returns the tenant policy cfg.
func New(cfg Config) *Table {
	if cfg.From == "" {
		cfg.From = TenantFromKey
	}
	if cfg.Max < 1 {
		cfg.Max = DefaultMaxTenants
	}
	return &Table{cfg: cfg, known: map[string]*tenant{}, other: &tenant{name: OtherTenant}, keyWaiting: map[string]int{}}
}

// Identify names the tenant and class of the request d describes, from
// the policy's source, h (the request's headers) and d's inbound key.
// Under TENANT_FROM=header, metadata or inbound a request without the
// thing named keeps the credential's tenant (d.Tenant). The class is the
// header's, but never above the inbound key's: a key made batch stays
// batch.
func (ts *Table) Identify(d request.Descriptor, h http.Header) (tenant string, class request.Class) {
	var name string
	switch ts.cfg.From {
	case TenantFromHeader:
		// UTF-8, and cut on a character: the name is a label value of the
		// metrics, which must be (a header value may hold any bytes).
		name = request.Cut(strings.ToValidUTF8(h.Get(TenantHeader), "\uFFFD"), maxTenantName)
	case TenantFromMetadata:
		name = d.UserID
	case TenantFromGateway:
		// Only a request with no inbound key, or with a key that names
		// no tenant of its own (the gateway's), may name a developer: a
		// developer's own sluice key speaks for its tenant alone, or its
		// holder could charge anyone's budget and escape their own.
		if d.Inbound != nil && d.Inbound.Tenant != "" {
			name = d.Inbound.Tenant
		} else if name = gatewayUser(h); name == "" && d.Inbound != nil {
			// Not a developer's request (the gateway's own, or one
			// from an IdP token without email or subject): the
			// gateway's inbound key's tenant.
			name = d.Inbound.Tenant
			if name == "" {
				name = d.Inbound.Name
			}
		}
	case TenantFromSession:
		// A session names a tenant only for requests without an inbound
		// key: with one, the key's tenant (and its limits) still bind, so
		// that a client cannot widen its share by naming sessions.
		if d.Inbound == nil {
			name = sessionOf(h, d.UserID)
			break
		}
		fallthrough
	case TenantFromInbound, TenantFromKey:
		// With inbound keys, the key a client brings is its sluice key
		// (the upstream's is sluice's own, the same for everyone): under
		// key as under inbound, its tenant is the key's.
		if in := d.Inbound; in != nil {
			name = in.Tenant
			if name == "" {
				name = in.Name
			}
		}
	}
	// A leading NUL is kept for an inbound key's gate key (keyGateKey):
	// no client names a tenant so (a header cannot hold it).
	tenant = d.Tenant
	if name = strings.TrimLeft(strings.TrimSpace(name), "\x00"); name != "" {
		tenant = name
	}
	class = request.ClassInteractive
	if strings.EqualFold(strings.TrimSpace(h.Get(PriorityHeader)), request.ClassBatch.String()) ||
		d.Inbound != nil && d.Inbound.Class == request.ClassBatch {
		class = request.ClassBatch
	}
	return tenant, class
}

// sessionOf is Claude Code's session id: its X-Claude-Code-Session-Id
// header, else the session_id of metadata.user_id when that is a JSON
// object (Claude Code sends {"device_id","account_uuid","session_id"} as a
// string); "" when neither. Valid UTF-8, cut to maxTenantName: a label
// value of the metrics.
func sessionOf(h http.Header, userID string) string {
	id := h.Get(SessionHeader)
	if strings.TrimSpace(id) == "" && strings.HasPrefix(userID, "{") {
		var u struct {
			SessionID string `json:"session_id"`
		}
		if json.Unmarshal([]byte(userID), &u) == nil {
			id = u.SessionID
		}
	}
	return request.Cut(strings.ToValidUTF8(id, "\uFFFD"), maxTenantName)
}

// Under TENANT_FROM=header or metadata, the client names its tenant, and
// one inbound key may speak for many: the key's own limits (max_waiting,
// max_concurrent) then bind the key as a whole, over all its requests
// whatever tenant each names, and the tenant shapes only the order
// within. Otherwise the key's tenant is the key's (or shared by the keys
// that name it), and its limits are its tenant's.

// bindsKey tells whether r's inbound key's limits bind apart from r's
// tenant.
func (ts *Table) bindsKey(r *request.Descriptor) bool {
	return r.Inbound != nil && (ts.cfg.From == TenantFromHeader || ts.cfg.From == TenantFromMetadata || ts.cfg.From == TenantFromGateway)
}

// keyGateKey is the gate's key for the requests of an inbound key whose
// max_concurrent binds apart from their tenants: it cannot be a tenant's
// name (Identify).
func keyGateKey(in *request.Inbound) string { return "\x00inbound key " + in.Name }

// Enter counts r in as waiting for its tenant (and its inbound key) and
// returns the tenant, or refuses it with a *dispatch.TenantFullError.
func (ts *Table) Enter(r *request.Descriptor) (dispatch.Tenant, error) {
	limit, keyLimit := ts.cfg.MaxWaiting, 0
	if in := r.Inbound; in != nil && in.MaxWaiting > 0 {
		if ts.bindsKey(r) {
			keyLimit = in.MaxWaiting
		} else {
			limit = in.MaxWaiting
		}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.find(r.Tenant)
	if limit > 0 && t.waiting >= limit {
		t.shed++
		return nil, &dispatch.TenantFullError{Tenant: t.name, Max: limit}
	}
	if keyLimit > 0 && ts.keyWaiting[r.Inbound.Name] >= keyLimit {
		t.shed++
		return nil, &dispatch.TenantFullError{Tenant: t.name, Max: keyLimit}
	}
	if ts.bindsKey(r) {
		ts.keyWaiting[r.Inbound.Name]++
	}
	t.waiting++
	ts.busy(t)
	return t, nil
}

// keyLeft counts one of r's inbound key's waiting requests out. ts.mu is
// held.
func (ts *Table) keyLeft(r *request.Descriptor) {
	if !ts.bindsKey(r) {
		return
	}
	if n := ts.keyWaiting[r.Inbound.Name] - 1; n > 0 {
		ts.keyWaiting[r.Inbound.Name] = n
	} else {
		delete(ts.keyWaiting, r.Inbound.Name)
	}
}

// find is the tracked tenant called name: found, made, made in place of
// the longest idle one, or OtherTenant. ts.mu is held.
func (ts *Table) find(name string) *tenant {
	if t := ts.known[name]; t != nil {
		return t
	}
	if name == OtherTenant {
		return ts.other
	}
	if len(ts.known) >= ts.cfg.Max {
		old := ts.idleHead
		if old == nil {
			return ts.other
		}
		ts.unidle(old)
		delete(ts.known, old.name)
	}
	t := &tenant{name: name}
	ts.known[name] = t
	return t
}

// busy takes t off the idle list. ts.mu is held.
func (ts *Table) busy(t *tenant) {
	if t.idle {
		ts.unidle(t)
	}
}

func (ts *Table) unidle(t *tenant) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		ts.idleHead = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		ts.idleTail = t.prev
	}
	t.prev, t.next, t.idle = nil, nil, false
}

// settle puts t on the idle list if it has nothing left. ts.mu is held.
func (ts *Table) settle(t *tenant) {
	if t.waiting > 0 || t.inFlight > 0 || t.idle || t == ts.other {
		return
	}
	t.idle, t.prev = true, ts.idleTail
	if ts.idleTail != nil {
		ts.idleTail.next = t
	} else {
		ts.idleHead = t
	}
	ts.idleTail = t
}

// Left is one of t's waiting requests, r, leaving without a slot.
func (ts *Table) Left(tn dispatch.Tenant, r *request.Descriptor) {
	t := tn.(*tenant)
	ts.mu.Lock()
	ts.keyLeft(r)
	t.waiting--
	ts.settle(t)
	ts.mu.Unlock()
}

// Granted is one of t's waiting requests, r, taking a slot.
func (ts *Table) Granted(tn dispatch.Tenant, r *request.Descriptor) {
	t := tn.(*tenant)
	ts.mu.Lock()
	ts.keyLeft(r)
	t.waiting--
	t.inFlight++
	ts.mu.Unlock()
}

// Done is one of t's requests giving its slot back for good.
func (ts *Table) Done(tn dispatch.Tenant) {
	t := tn.(*tenant)
	ts.mu.Lock()
	t.inFlight--
	t.served++
	ts.settle(t)
	ts.mu.Unlock()
}

// Ticket fills tk for a member of tenant t with request r.
func (ts *Table) Ticket(tk *gate.Ticket, tn dispatch.Tenant, r *request.Descriptor) {
	t := tn.(*tenant)
	tk.Key = t.name
	tk.Cost = int64(r.Cost.InputTokens) + int64(r.Cost.MaxTokens)
	tk.Class = gate.Class(r.Class) // the same values (TestClassesAreTheGates)
	tk.Weight = ts.cfg.Weights[t.name]
	tk.MaxInFlight = ts.cfg.MaxConcurrent
	if in := r.Inbound; in != nil {
		if in.Weight > 0 {
			tk.Weight = in.Weight
		}
		if in.MaxConcurrent > 0 {
			tk.MaxInFlight = in.MaxConcurrent
			if ts.bindsKey(r) {
				// The gate caps a key's slots: the inbound key's
				// requests share one, in arrival order within it.
				tk.Key = keyGateKey(in)
			}
		}
	}
}

// AddTokens counts n tokens of usage to the tenant called name, if it is
// tracked (or to OtherTenant).
func (ts *Table) AddTokens(name string, n int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.known[name]
	if t == nil {
		t = ts.other
	}
	t.tokens += n
}

// Stats reports every tracked tenant (OtherTenant first), at most Max+1.
// A tenant that gives its place to another loses its counts.
func (ts *Table) Stats() []dispatch.TenantStats {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]dispatch.TenantStats, 0, len(ts.known)+1)
	add := func(t *tenant) {
		out = append(out, dispatch.TenantStats{Tenant: t.name, Waiting: t.waiting, InFlight: t.inFlight, Shed: t.shed, Served: t.served, Tokens: t.tokens})
	}
	add(ts.other)
	for _, name := range slices.Sorted(maps.Keys(ts.known)) {
		add(ts.known[name])
	}
	return out
}

// Name is the tenant's name.
func (t *tenant) Name() string { return t.name }
