package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/keystore"
	"github.com/sluicehq/sluice/spendstore"
)

// hungStore is a keys store that never answers: every call waits for its
// context, as one on a stopped PostgreSQL does.
type hungStore struct{ keystore.Store }

func (hungStore) Keys(ctx context.Context) ([]keystore.Key, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungStore) Budgets(ctx context.Context) ([]keystore.Budget, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungStore) Audit(ctx context.Context, _ int, _ int64) ([]keystore.Numbered, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// The admin API's reads of a store that hangs are answered 503 within
// adminStoreTimeout, as its writes are: they waited as long as the store
// hung (a client's 90 s) before.
func TestAdminReadsOfAHungStoreAreBounded(t *testing.T) {

	defer func(d time.Duration) { adminStoreTimeout = d }(adminStoreTimeout)
	adminStoreTimeout = 200 * time.Millisecond
	up := startUpstream(t, apiHandler)
	cfg := testConfig(t, up.URL, false)
	cfg.AdminKey, cfg.AdminListenAddr = testAdminKey, "127.0.0.1:0"
	cfg.InboundKeysStore, cfg.SpendStore = true, config.SpendStoreSQLite
	p, err := newProxy(t, cfg, Options{Keys: hungStore{}})
	if err != nil {
		t.Fatal(err)
	}
	h := p.AdminHandler(nil)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/admin/keys", ""},
		{"GET", "/admin/audit", ""},
		{"PUT", "/admin/budgets/b2", `{"scope":"tenant","target":"t","usd":1,"period":"day"}`},
	} {
		r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		r.Header.Set("X-Api-Key", testAdminKey)
		w := httptest.NewRecorder()
		done := make(chan struct{})
		go func() { h.ServeHTTP(w, r); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s %s: no answer within 10 s from a hung store", c.method, c.path)
		}
		if w.Code != http.StatusServiceUnavailable {
			t.Errorf("%s %s: %d %s; want 503", c.method, c.path, w.Code, w.Body)
		}
	}
}

// What the admin API makes is answered 201 as JSON: the headers went out
// with the status before they were set, as text/plain.
func TestAdminCreatedIsJSON(t *testing.T) {
	up := startUpstream(t, apiHandler)
	cfg := testConfig(t, up.URL, false)
	cfg.AdminKey, cfg.AdminListenAddr = testAdminKey, "127.0.0.1:0"
	cfg.InboundKeysStore, cfg.SpendStore = true, config.SpendStoreSQLite
	books, err := spendstore.Open(false, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer books.Close()
	p, err := newProxy(t, cfg, Options{Books: books, Keys: books})
	if err != nil {
		t.Fatal(err)
	}
	h := p.AdminHandler(nil)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/admin/keys", `{"name":"dev"}`},
		{"PUT", "/admin/budgets/b2", `{"scope":"tenant","target":"t","usd":1,"period":"day"}`},
	} {
		r := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
		r.Header.Set("X-Api-Key", testAdminKey)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %q; want 201 application/json", c.method, c.path, w.Code, w.Header().Get("Content-Type"))
		}
	}
}

// A group budget that could bind no one, or not the person signed in, is
// refused when it is put: without identity-provider tokens, and when the
// client names its own tenant (each name would be a fresh budget: a
// hostile run made 2,000 of them from one token).
func TestAdminRefusesGroupBudgetsThatCannotBind(t *testing.T) {
	for _, c := range []struct {
		name   string
		oidc   bool
		from   config.TenantFrom
		status int
		hint   string
	}{
		{"without OIDC_ISSUER", false, config.TenantFromKey, 400, "OIDC_ISSUER"},
		{"TENANT_FROM=header", true, config.TenantFromHeader, 400, "TENANT_FROM=header"},
		{"TENANT_FROM=metadata", true, config.TenantFromMetadata, 400, "TENANT_FROM=metadata"},
		{"TENANT_FROM=key with OIDC", true, config.TenantFromKey, 201, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := startUpstream(t, apiHandler)
			cfg := testConfig(t, up.URL, false)
			cfg.AdminKey, cfg.AdminListenAddr = testAdminKey, "127.0.0.1:0"
			cfg.InboundKeysStore, cfg.SpendStore, cfg.TenantFrom = true, config.SpendStoreSQLite, c.from
			if c.oidc {
				cfg.OIDCIssuer, cfg.OIDCAudience = "https://idp.example.com", "sluice"
			}
			books, err := spendstore.Open(false, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer books.Close()
			p, err := newProxy(t, cfg, Options{Books: books, Keys: books})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("PUT", "/admin/budgets/contractors-day", strings.NewReader(`{"scope":"group","target":"contractors","usd":5,"period":"day"}`))
			r.Header.Set("X-Api-Key", testAdminKey)
			w := httptest.NewRecorder()
			p.AdminHandler(nil).ServeHTTP(w, r)
			if w.Code != c.status || !strings.Contains(w.Body.String(), c.hint) {
				t.Errorf("%d %s; want %d saying %q", w.Code, w.Body, c.status, c.hint)
			}
		})
	}
}
