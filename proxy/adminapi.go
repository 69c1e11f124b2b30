package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/spend"
)

// The admin API, on the admin listener only (ADMIN_LISTEN_ADDR; the API
// port answers /admin/ 404): GET /admin/spend, the spend books by tenant,
// key, model and period, and GET /admin/budgets, each budget's state;
// JSON, or CSV with ?format=csv. It asks for ADMIN_KEY, as x-api-key or a
// bearer token, and is off without one.

// Books are the spend books the admin API reads (package spendstore's
// Store, which the caller opens: the proxy's library links no store
// driver).
type Books interface {
	// Spent hears the ledger's spend, when the proxy makes the ledger.
	spend.Sink
	// Query is the books' lines f selects; an error whose text starts
	// "period " is the caller's bad period.
	Query(ctx context.Context, f spend.Filter) ([]spend.Line, error)
	// Where names the store (never its DSN); Durable says it survives a
	// restart, Shared that replicas share it, Failing that its writes
	// (or reads of the other replicas' spend) fail now.
	Where() string
	Durable() bool
	Shared() bool
	Failing() bool
}

// mountAdminAPI adds the admin API's routes to the admin listener's mux.
func (p *Proxy) mountAdminAPI(mux *http.ServeMux) {
	mux.Handle("/admin/", p.adminAuth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apierror.WriteSluice(w, &apierror.Error{Status: http.StatusNotFound, Type: "not_found_error",
			Message: "the admin API serves GET /admin/spend, GET /admin/budgets and, with INBOUND_KEYS_STORE=1, /admin/keys, PUT and DELETE /admin/budgets/{name} and GET /admin/audit (docs/admin-api.md)"})
	})))
	mux.Handle("GET /admin/spend", p.adminAuth(http.HandlerFunc(p.adminSpend)))
	mux.Handle("GET /admin/budgets", p.adminAuth(http.HandlerFunc(p.adminBudgets)))
	p.mountAdminKeys(mux)
}

// adminAuth lets through a request that presents ADMIN_KEY. The key is
// compared by its SHA-256, in constant time, so that neither its length
// nor its bytes show in the time taken; it is never logged (the access
// log names the path, not the headers).
func (p *Proxy) adminAuth(h http.Handler) http.Handler {
	want := sha256.Sum256([]byte(p.cfg.AdminKey))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.cfg.AdminKey == "" {
			apierror.WriteSluice(w, &apierror.Error{Status: http.StatusNotFound, Type: "not_found_error",
				Message: "the admin API is off: its operator sets ADMIN_KEY to turn it on"})
			return
		}
		got := presented(r.Header)
		sum := sha256.Sum256([]byte(got))
		if got == "" || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
			apierror.WriteSluice(w, &apierror.Error{Status: http.StatusUnauthorized, Type: "authentication_error",
				Message: "the admin API needs the admin key (ADMIN_KEY), as x-api-key or Authorization: Bearer; none was given, or it is not that key"})
			return
		}
		// A store that hangs (a PostgreSQL stopped, a lock held) is
		// answered 503 within adminStoreTimeout, reads as writes, rather
		// than holding the operator's call for as long as it hangs.
		ctx, cancel := context.WithTimeout(r.Context(), adminStoreTimeout)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// adminStoreTimeout bounds each admin API call's use of the store.
var adminStoreTimeout = 10 * time.Second

// adminPageMax is the most lines one page of /admin/spend holds.
const adminPageMax = 1000

func badAdminQuery(w http.ResponseWriter, msg string) {
	apierror.WriteSluice(w, apierror.New(http.StatusBadRequest, "invalid_request_error", msg))
}

// adminSpend is GET /admin/spend: ?tenant=, ?key= (a short hash), ?model=
// select; ?period=day (the default), week, month or all groups, by UTC
// periods; ?from= and ?to= (YYYY-MM-DD, UTC, to excluded) bound;
// ?limit= (100; at most 1000) and ?page= (the last page's next_page)
// page; ?format=csv answers every line selected as CSV.
func (p *Proxy) adminSpend(w http.ResponseWriter, r *http.Request) {
	if p.books == nil {
		apierror.WriteSluice(w, &apierror.Error{Status: http.StatusNotFound, Type: "not_found_error", Message: "this sluice keeps no spend books"})
		return
	}
	q := r.URL.Query()
	f := spend.Filter{Tenant: q.Get("tenant"), Key: q.Get("key"), Model: q.Get("model"), Period: q.Get("period")}
	if f.Period == "" {
		f.Period = "day"
	}
	for _, d := range []struct {
		name string
		t    *time.Time
	}{{"from", &f.From}, {"to", &f.To}} {
		if v := q.Get(d.name); v != "" {
			t, err := time.Parse(time.DateOnly, v)
			if err != nil {
				badAdminQuery(w, d.name+"="+strconv.Quote(v)+": want a UTC date, YYYY-MM-DD")
				return
			}
			*d.t = t
		}
	}
	limit, offset := 100, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > adminPageMax {
			badAdminQuery(w, "limit="+strconv.Quote(v)+": want a whole number from 1 to "+strconv.Itoa(adminPageMax))
			return
		}
		limit = n
	}
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			badAdminQuery(w, "page="+strconv.Quote(v)+": want the next_page of the page before")
			return
		}
		offset = n
	}
	lines, err := p.books.Query(r.Context(), f)
	if err != nil {
		if strings.HasPrefix(err.Error(), "period ") {
			badAdminQuery(w, err.Error())
			return
		}
		p.log.Error("admin API: reading the spend books failed", "err", err)
		apierror.WriteSluice(w, &apierror.Error{Status: http.StatusServiceUnavailable, Type: "api_error",
			Message: "the spend books could not be read (see sluice's log); retry later. Meanwhile spend is held in memory, to be written when the books take it, and budgets are enforced from memory (GET /admin/budgets says how much was spent)"})
		return
	}
	if q.Get("format") == "csv" {
		writeCSV(w, "spend.csv", []string{"period", "period_start", "tenant", "key", "model", "usd", "estimated_usd", "tokens", "answers"}, len(lines), func(i int) []string {
			l := lines[i]
			return []string{l.Period, l.Start.Format(time.RFC3339), l.Tenant, l.Key, l.Model, money(l.USD), money(l.EstimatedUSD),
				strconv.FormatInt(l.Tokens, 10), strconv.FormatInt(l.Answers, 10)}
		})
		return
	}
	page := lines[min(offset, len(lines)):min(offset+limit, len(lines))]
	out := struct {
		Data     []spend.Line `json:"data"`
		HasMore  bool         `json:"has_more"`
		NextPage string       `json:"next_page,omitempty"`
		Store    adminStore   `json:"store"`
	}{Data: page, HasMore: offset+limit < len(lines), Store: p.adminStore()}
	if out.HasMore {
		out.NextPage = strconv.Itoa(offset + limit)
	}
	writeJSON(w, out)
}

// adminStore is what the admin API says of the books: where, whether
// they survive a restart and are shared by replicas, whether writes (or
// reads of the other replicas' spend) are failing, the spend then held in
// memory and counted in /admin/spend's answer, and what budgets are
// enforced from: "shared" (this replica's count and the other replicas'
// as read every budget.RefreshEvery), "memory" (shared books that cannot
// be read or written now: this replica's count and the last read), or
// "local" (books of this replica's own: each replica's budgets bind its
// own traffic).
type adminStore struct {
	Where        string `json:"where"`
	Durable      bool   `json:"durable"`
	Shared       bool   `json:"shared"`
	Failing      bool   `json:"failing"`
	EnforcedFrom string `json:"budgets_enforced_from"`
}

// BooksNote is what the page says of the spend books when it matters:
// while they cannot be written (or, shared, read), spend is held in
// memory and budgets are enforced from it; "" otherwise.
func (p *Proxy) BooksNote() string {
	st := p.adminStore()
	switch {
	case st.EnforcedFrom == "memory":
		return "The shared spend books (" + st.Where + ") cannot be written or read now: spend is held in memory and written when they can be, and budgets are enforced from memory (this replica's count, and the other replicas' as last read)."
	case st.Failing:
		return "The spend books (" + st.Where + ") cannot be written now: spend is held in memory and written when they can be; budgets are enforced from memory."
	}
	return ""
}

func (p *Proxy) adminStore() adminStore {
	if p.books == nil {
		return adminStore{Where: "none", EnforcedFrom: "local"}
	}
	st := adminStore{Where: p.books.Where(), Durable: p.books.Durable(), Shared: p.books.Shared(), Failing: p.books.Failing(), EnforcedFrom: "local"}
	if st.Shared {
		st.EnforcedFrom = "shared"
		if st.Failing || p.budgets.FromMemory() {
			st.EnforcedFrom = "memory"
		}
	}
	return st
}

// adminBudgets is GET /admin/budgets: every budget, what was spent of it
// this period, its limit and when it resets; ?format=csv as CSV.
func (p *Proxy) adminBudgets(w http.ResponseWriter, r *http.Request) {
	st := p.budgets.Statuses()
	if r.URL.Query().Get("format") == "csv" {
		writeCSV(w, "budgets.csv", []string{"name", "tenant", "key", "unit", "period", "time_zone", "limit", "warn_at", "spent", "overshoot", "exceeded", "period_start", "resets_at", "group", "members"}, len(st), func(i int) []string {
			s := st[i]
			members := "" // a group budget's: how many members it has seen
			if s.Members != nil {
				members = strconv.Itoa(*s.Members)
			}
			return []string{s.Name, s.Tenant, s.Key, s.Unit, s.Period, s.Zone, money(s.Limit), money(s.Warn), money(s.Spent), money(s.Overshoot),
				strconv.FormatBool(s.Exceeded), s.Start.Format(time.RFC3339), s.Reset.Format(time.RFC3339), s.Group, members}
		})
		return
	}
	if st == nil {
		st = []budget.Status{}
	}
	writeJSON(w, struct {
		Data  any        `json:"data"`
		Store adminStore `json:"store"`
	}{st, p.adminStore()})
}

// money is an amount as CSV writes it: no exponent, to the micro-dollar
// (or token).
func money(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

// writeJSONStatus is writeJSON with another status (201 for what was
// made): the headers go out with the status, so they are set first.
func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		apierror.WriteSluice(w, errInternal)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// writeCSV writes n rows of row under head as a CSV download called name.
func writeCSV(w http.ResponseWriter, name string, head []string, n int, row func(int) []string) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	c := csv.NewWriter(w)
	c.Write(head)
	for i := range n {
		cells := row(i)
		for j, v := range cells {
			// A tenant may be named by its client (TENANT_FROM=header): a
			// cell a spreadsheet would run as a formula is quoted.
			if v != "" && strings.ContainsRune("=+-@\t\r", rune(v[0])) {
				cells[j] = "'" + v
			}
		}
		c.Write(cells)
	}
	c.Flush()
}
