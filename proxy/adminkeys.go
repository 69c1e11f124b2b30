package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/keystore"
)

// The admin API's keys and budgets (INBOUND_KEYS_STORE), on the admin
// listener behind ADMIN_KEY (docs/admin-api.md):
//
//	POST   /admin/keys            create a key; the answer holds the key, once
//	GET    /admin/keys            the keys, revoked ones too (never a key: its hash)
//	PATCH  /admin/keys/{name}     change a key's tenant, weight, class, limits, models, backends
//	DELETE /admin/keys/{name}     revoke it
//	PUT    /admin/budgets/{name}  create or change a budget on a key or a tenant
//	DELETE /admin/budgets/{name}  remove it
//	GET    /admin/audit           who changed what, when, the newest first
//
// Each change is written to the store with its audit line in one
// transaction, logged, and in force on this replica at once and on the
// others within keystore.PollEvery.

// maxAdminBody bounds a request body of the admin API: a key's or a
// budget's settings are well under it.
const maxAdminBody = 64 << 10

func (p *Proxy) mountAdminKeys(mux *http.ServeMux) {
	for _, route := range []struct {
		pattern string
		h       http.HandlerFunc
	}{
		{"POST /admin/keys", p.adminCreateKey},
		{"GET /admin/keys", p.adminListKeys},
		{"PATCH /admin/keys/{name}", p.adminUpdateKey},
		{"DELETE /admin/keys/{name}", p.adminRevokeKey},
		{"PUT /admin/budgets/{name}", p.adminPutBudget},
		{"DELETE /admin/budgets/{name}", p.adminDeleteBudget},
		{"GET /admin/audit", p.adminAudit},
	} {
		mux.Handle(route.pattern, p.adminAuth(p.needKeysStore(route.h)))
	}
}

func (p *Proxy) needKeysStore(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.keys == nil {
			apierror.WriteSluice(w, &apierror.Error{Status: http.StatusNotFound, Type: "not_found_error",
				Message: "keys and budgets are changed through the admin API only with INBOUND_KEYS_STORE=1 (and SPEND_STORE=sqlite or postgres://...); this sluice reads them from its files"})
			return
		}
		h(w, r)
	})
}

// keyFields are what a key's create and change set; absent fields
// (nil) stay as they are on a change.
type keyFields struct {
	Name          string    `json:"name,omitempty"`
	Tenant        *string   `json:"tenant,omitempty"`
	Weight        *float64  `json:"weight,omitempty"`
	Class         *string   `json:"class,omitempty"`
	MaxConcurrent *int      `json:"max_concurrent,omitempty"`
	MaxWaiting    *int      `json:"max_waiting,omitempty"`
	Models        *[]string `json:"models,omitempty"`
	Backends      *[]string `json:"backends,omitempty"`
}

func (f keyFields) apply(k *keystore.Key) error {
	if f.Tenant != nil {
		k.Tenant = *f.Tenant
	}
	if f.Weight != nil {
		k.Weight = *f.Weight
	}
	if f.Class != nil {
		k.Class = *f.Class
	}
	if f.MaxConcurrent != nil {
		k.MaxConcurrent = *f.MaxConcurrent
	}
	if f.MaxWaiting != nil {
		k.MaxWaiting = *f.MaxWaiting
	}
	if f.Models != nil {
		k.Models = *f.Models
	}
	if f.Backends != nil {
		k.Backends = *f.Backends
	}
	// The keys file's checks, and so its words.
	e := keysFileEntry{Name: k.Name, SHA256: k.SHA256, Tenant: k.Tenant, Weight: k.Weight, Class: k.Class,
		MaxConcurrent: k.MaxConcurrent, MaxWaiting: k.MaxWaiting, Models: k.Models, Backends: k.Backends}
	_, err := e.key()
	return err
}

// readAdminBody decodes the request's JSON body into v: at most
// maxAdminBody, no unknown member (a "key" member would be a key in the
// clear, and a misspelt one a setting silently ignored).
func readAdminBody(w http.ResponseWriter, r *http.Request, v any) bool {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxAdminBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			apierror.WriteSluice(w, apierror.New(http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("the admin API takes bodies of at most %d KB", maxAdminBody>>10)))
			return false
		}
		badAdminQuery(w, "the body could not be read: "+err.Error())
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		badAdminQuery(w, "the body is not the JSON object expected: "+err.Error()+" (see docs/admin-api.md)")
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		// A second object would be ignored: the caller meant something.
		badAdminQuery(w, "the body holds more after its JSON object; send one object (see docs/admin-api.md)")
		return false
	}
	return true
}

// actor is who the audit says made a change: the name the caller gives
// (X-Sluice-Actor; the CLI sends the operator's login), printable and
// short, and the address it came from. Everyone holding ADMIN_KEY may
// give any name: the address is what sluice saw.
func actor(r *http.Request) string {
	name := r.Header.Get("X-Sluice-Actor")
	if len(name) > 64 || strings.ContainsFunc(name, func(c rune) bool { return c < ' ' || c > '~' }) {
		name = "?"
	}
	if name == "" {
		name = "admin"
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return name + " from " + host
}

// change is the audit line of a change by r's caller, logged as it is
// written.
func (p *Proxy) change(r *http.Request, action, target string, detail any) keystore.Change {
	d, _ := json.Marshal(detail)
	return keystore.Change{At: time.Now().UTC(), Who: actor(r), Action: action, Target: target, Detail: string(d)}
}

// changed logs a change made and puts it in force here now.
func (p *Proxy) changed(c keystore.Change) {
	p.log.Info("admin: "+c.Action, "who", c.Who, "target", c.Target, "detail", c.Detail, "at", c.At.Format(time.RFC3339Nano))
	if p.keysChanged != nil {
		p.keysChanged()
	}
}

// storeFailed answers an error of the store: the caller's when it is a
// name taken, missing or revoked, else a 503.
func (p *Proxy) storeFailed(w http.ResponseWriter, what, name string, err error) {
	switch {
	case errors.Is(err, keystore.ErrExists):
		apierror.WriteSluice(w, apierror.New(http.StatusConflict, "invalid_request_error", fmt.Sprintf("%s %q exists already: choose another name", what, name)))
	case errors.Is(err, keystore.ErrNotFound):
		apierror.WriteSluice(w, apierror.New(http.StatusNotFound, "not_found_error", fmt.Sprintf("there is no %s %q in the keys store", what, name)))
	case errors.Is(err, keystore.ErrRevoked):
		apierror.WriteSluice(w, apierror.New(http.StatusConflict, "invalid_request_error", fmt.Sprintf("%s %q is revoked and cannot change: create a new key", what, name)))
	default:
		p.log.Error("admin API: the keys store failed", "err", err)
		apierror.WriteSluice(w, &apierror.Error{Status: http.StatusServiceUnavailable, Type: "api_error",
			Message: "the keys store could not be read or written (see sluice's log); nothing was changed; retry later"})
	}
}

func badName(w http.ResponseWriter, what, name string) bool {
	if validKeyName(name) {
		return false
	}
	badAdminQuery(w, what+" name "+strconv.Quote(name)+": want 1 to 64 letters, digits and . _ @ : -")
	return true
}

// adminCreateKey is POST /admin/keys.
func (p *Proxy) adminCreateKey(w http.ResponseWriter, r *http.Request) {
	var f keyFields
	if !readAdminBody(w, r, &f) || badName(w, "key", f.Name) {
		return
	}
	if _, ok := p.inbound.FileKey(f.Name); ok {
		p.storeFailed(w, "key", f.Name, keystore.ErrExists)
		return
	}
	key, sum := NewKey()
	k := keystore.Key{Name: f.Name, SHA256: sum}
	if err := f.apply(&k); err != nil {
		badAdminQuery(w, "key "+strconv.Quote(f.Name)+": "+err.Error())
		return
	}
	c := p.change(r, "key.create", k.Name, f)
	k.Created, k.CreatedBy = c.At, c.Who
	if err := p.keys.CreateKey(r.Context(), k, c); err != nil {
		p.storeFailed(w, "key", f.Name, err)
		return
	}
	p.changed(c)
	w.Header().Set("Cache-Control", "no-store")
	writeJSONStatus(w, http.StatusCreated, struct {
		Key    string       `json:"key"`
		Note   string       `json:"note"`
		Record keystore.Key `json:"record"`
	}{key, "give the key to its holder now: sluice keeps only its SHA-256 and cannot show it again", k})
}

// adminListKeys is GET /admin/keys.
func (p *Proxy) adminListKeys(w http.ResponseWriter, r *http.Request) {
	keys, err := p.keys.Keys(r.Context())
	if err != nil {
		p.storeFailed(w, "key", "", err)
		return
	}
	if keys == nil {
		keys = []keystore.Key{}
	}
	writeJSON(w, struct {
		Data []keystore.Key `json:"data"`
	}{keys})
}

// adminUpdateKey is PATCH /admin/keys/{name}.
func (p *Proxy) adminUpdateKey(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var f keyFields
	if badName(w, "key", name) || !readAdminBody(w, r, &f) {
		return
	}
	if f.Name != "" && f.Name != name {
		badAdminQuery(w, "a key cannot be renamed (its budgets name it): create a new key and revoke this one")
		return
	}
	f.Name = name
	c := p.change(r, "key.update", name, f)
	k, err := p.keys.UpdateKey(r.Context(), name, f.apply, c)
	if err != nil {
		if errors.Is(err, keystore.ErrExists) || errors.Is(err, keystore.ErrNotFound) || errors.Is(err, keystore.ErrRevoked) || strings.HasPrefix(err.Error(), "keys store") {
			p.storeFailed(w, "key", name, err)
		} else {
			badAdminQuery(w, "key "+strconv.Quote(name)+": "+err.Error())
		}
		return
	}
	p.changed(c)
	writeJSON(w, k)
}

// adminRevokeKey is DELETE /admin/keys/{name}: the key is refused by
// every replica within keystore.PollEvery, and kept, revoked, for the
// audit.
func (p *Proxy) adminRevokeKey(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if badName(w, "key", name) {
		return
	}
	c := p.change(r, "key.revoke", name, nil)
	c.Detail = ""
	if err := p.keys.RevokeKey(r.Context(), name, c); err != nil {
		p.storeFailed(w, "key", name, err)
		return
	}
	p.changed(c)
	writeJSON(w, struct {
		Name    string    `json:"name"`
		Revoked time.Time `json:"revoked_at"`
	}{name, c.At})
}

// budgetFields are a budget's PUT body: what it binds and its amount,
// as a config file's [[budgets]] table spells it.
type budgetFields struct {
	Scope  string `json:"scope"`
	Target string `json:"target"`
	budget.File
}

// adminPutBudget is PUT /admin/budgets/{name}.
func (p *Proxy) adminPutBudget(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var f budgetFields
	if badName(w, "budget", name) || !readAdminBody(w, r, &f) {
		return
	}
	if f.Scope == "group" {
		if msg := p.groupBudgetRefusal(f.Target); msg != "" {
			badAdminQuery(w, "budget "+strconv.Quote(name)+": "+msg)
			return
		}
	}
	b := keystore.Budget{Name: name, Scope: f.Scope, Target: f.Target, Amount: f.File}
	keys, err := p.keys.Keys(r.Context())
	if err != nil {
		p.storeFailed(w, "budget", name, err)
		return
	}
	if f.Scope == "key" {
		if hash, ok := p.inbound.FileKey(f.Target); ok {
			b.Target = hash // a key of the keys file, by its hash
		} else if !slices.ContainsFunc(keys, func(k keystore.Key) bool { return k.Name == f.Target }) && !validHash(f.Target) {
			badAdminQuery(w, "budget "+strconv.Quote(name)+": target: no key of that name in the keys store or the keys file; give a key's name, or its short hash (never the key)")
			return
		}
	}
	if _, err := b.Spec(keys); err != nil {
		badAdminQuery(w, "budget "+strconv.Quote(name)+": "+err.Error())
		return
	}
	stored, err := p.keys.Budgets(r.Context())
	if err != nil {
		p.storeFailed(w, "budget", name, err)
		return
	}
	inStore := slices.ContainsFunc(stored, func(o keystore.Budget) bool { return o.Name == name })
	if !inStore && slices.ContainsFunc(p.budgets.Statuses(), func(s budget.Status) bool { return s.Name == name }) {
		apierror.WriteSluice(w, apierror.New(http.StatusConflict, "invalid_request_error",
			fmt.Sprintf("budget %q is the config file's or the keys file's: change it there, or give this one another name", name)))
		return
	}
	c := p.change(r, "budget.put", name, f)
	b.Updated = c.At
	created, err := p.keys.PutBudget(r.Context(), b, c)
	if err != nil {
		p.storeFailed(w, "budget", name, err)
		return
	}
	p.changed(c)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSONStatus(w, status, b)
}

// groupBudgetRefusal says why a budget on the identity-provider group
// target would bind no one, or bind no one for sure, on this sluice; ""
// if it binds. A group budget binds each member by their tenant, so the
// tenant must be the token's holder, not a name the client chooses.
func (p *Proxy) groupBudgetRefusal(target string) string {
	switch {
	case p.cfg.OIDCIssuer == "":
		return "a group budget binds the members of an identity-provider group, and this sluice takes no identity-provider tokens (OIDC_ISSUER is not set): set it, or budget a tenant or a key"
	case target == "*":
		return `target "*": a group budget names one group as the tokens' groups claim spells it; to bind every signed-in person, budget each group, or each tenant`
	case p.cfg.TenantFrom == config.TenantFromHeader || p.cfg.TenantFrom == config.TenantFromMetadata:
		return "with TENANT_FROM=" + p.cfg.TenantFrom.String() + " a signed-in client names its own tenant, and a group budget binds each member by their tenant: each new name would be a fresh budget. Keep TENANT_FROM=key (each token's email) for group budgets (docs/spend.md)"
	}
	return ""
}

// validHash says s is a key's short hash or its whole SHA-256, in hex.
func validHash(s string) bool {
	if len(s) != 16 && len(s) != 64 {
		return false
	}
	return strings.Trim(strings.ToLower(s), "0123456789abcdef") == ""
}

// adminDeleteBudget is DELETE /admin/budgets/{name}.
func (p *Proxy) adminDeleteBudget(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if badName(w, "budget", name) {
		return
	}
	c := p.change(r, "budget.delete", name, nil)
	c.Detail = ""
	if err := p.keys.DeleteBudget(r.Context(), name, c); err != nil {
		p.storeFailed(w, "budget", name, err)
		return
	}
	p.changed(c)
	w.WriteHeader(http.StatusNoContent)
}

// adminAudit is GET /admin/audit: ?limit= (100; at most 1000) changes,
// the newest first, before ?before= (the last page's next_before).
func (p *Proxy) adminAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, before := 100, int64(0)
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > adminPageMax {
			badAdminQuery(w, "limit="+strconv.Quote(v)+": want a whole number from 1 to "+strconv.Itoa(adminPageMax))
			return
		}
		limit = n
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			badAdminQuery(w, "before="+strconv.Quote(v)+": want the next_before of the page before")
			return
		}
		before = n
	}
	lines, err := p.keys.Audit(r.Context(), limit, before)
	if err != nil {
		p.storeFailed(w, "audit", "", err)
		return
	}
	out := struct {
		Data       []keystore.Numbered `json:"data"`
		NextBefore string              `json:"next_before,omitempty"`
	}{Data: lines}
	if len(lines) == limit {
		out.NextBefore = strconv.FormatInt(lines[len(lines)-1].Seq, 10)
	}
	writeJSON(w, out)
}
