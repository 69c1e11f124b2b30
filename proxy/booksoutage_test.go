package proxy

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/spendstore"
)

// While the shared spend books cannot be written or read, requests are
// answered as ever, and the admin API and the page say budgets are
// enforced from memory; once the books are back they say shared again.
func TestBooksOutageSaysBudgetsFromMemory(t *testing.T) {
	dsn := pgtest.Start(t)
	up := startUpstream(t, (&upstreamSeen{}).handler)
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	adminLn, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg := testConfig(t, up.URL, true, withBudget(budget.Spec{Unit: budget.Tokens, Limit: 1e6, Period: budget.Day}))
	cfg.AdminListenAddr, cfg.AdminKey = adminLn.Addr().String(), testAdminKey
	books, err := spendstore.OpenPostgres(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer books.Close()
	p, err := newProxy(t, cfg, Options{Books: books})
	if err != nil {
		t.Fatal(err)
	}
	stopShare := p.budgets.Share(books)
	defer stopShare()
	stop := (&Server{Proxy: p, Admin: adminLn, AdminHandler: p.AdminHandler(nil)}).Start(apiLn)
	defer stop()
	api, admin := "http://"+apiLn.Addr().String(), "http://"+adminLn.Addr().String()
	send := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, api+"/v1/messages", strings.NewReader(requestJSON))
		req.Header.Set("X-Api-Key", "sk-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a request during the books' state: %d", resp.StatusCode)
		}
	}
	enforced := func(path string) (string, bool) {
		t.Helper()
		_, _, body := adminGet(t, admin, path, testAdminKey, false)
		var out struct {
			Store struct {
				Shared  bool   `json:"shared"`
				Failing bool   `json:"failing"`
				From    string `json:"budgets_enforced_from"`
			} `json:"store"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil || !out.Store.Shared {
			t.Fatalf("%s: %v %s", path, err, body)
		}
		return out.Store.From, out.Store.Failing
	}
	send()
	if from, failing := enforced("/admin/budgets"); from != "shared" || failing || p.BooksNote() != "" {
		t.Fatalf("books up: enforced from %q, failing %v, note %q", from, failing, p.BooksNote())
	}

	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`ALTER TABLE spend RENAME TO away`); err != nil {
		t.Fatal(err)
	}
	send()
	books.Flush() // the writer's tick, now
	p.budgets.Refresh(books)
	send() // still answered
	if from, failing := enforced("/admin/budgets"); from != "memory" || !failing {
		t.Errorf("books down: /admin/budgets says enforced from %q, failing %v", from, failing)
	}
	// The books themselves cannot be read: a 503 that says so, and what
	// holds meanwhile.
	if code, _, body := adminGet(t, admin, "/admin/spend", testAdminKey, false); code != http.StatusServiceUnavailable || !strings.Contains(body, "budgets are enforced from memory") {
		t.Errorf("books down: /admin/spend %d %s", code, body)
	}
	if n := p.BooksNote(); !strings.Contains(n, "budgets are enforced from memory") {
		t.Errorf("books down: the page's note %q", n)
	}
	if st := p.budgets.Statuses(); len(st) != 1 || st[0].Spent == 0 {
		t.Errorf("books down: the budget %+v; want this replica's count", st)
	}

	if _, err := db.Exec(`ALTER TABLE away RENAME TO spend`); err != nil {
		t.Fatal(err)
	}
	if err := books.Flush(); err != nil {
		t.Fatal(err)
	}
	p.budgets.Refresh(books)
	if from, failing := enforced("/admin/spend"); from != "shared" || failing || p.BooksNote() != "" {
		t.Errorf("books back: enforced from %q, failing %v, note %q", from, failing, p.BooksNote())
	}
}
