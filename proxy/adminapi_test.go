package proxy

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/spendstore"
)

const testAdminKey = "admin-key-0123456789-secret"

// adminGet asks the admin listener for path with key ("" none) as
// x-api-key, or as a bearer token when bearer.
func adminGet(t *testing.T, base, path, key string, bearer bool) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	switch {
	case key != "" && bearer:
		req.Header.Set("Authorization", "Bearer "+key)
	case key != "":
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// The admin API on the admin listener: the books by key (paged), the
// budgets, CSV; 401 Anthropic-shaped without the admin key or with
// another; 404 on the API port, and nothing relayed; the key in no log,
// metric or page.
func TestAdminAPI(t *testing.T) {
	seen := &upstreamSeen{}
	up := startUpstream(t, seen.handler)
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	adminLn, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg := testConfig(t, up.URL, true, withBudget(budget.Spec{Unit: budget.Tokens, Limit: 1000, Warn: 10, Period: budget.Week}))
	cfg.AdminListenAddr, cfg.AdminKey = adminLn.Addr().String(), testAdminKey
	cfg.PublicURL = &url.URL{Scheme: "http", Host: apiLn.Addr().String()}
	books, err := spendstore.Open(false, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer books.Close()
	var logs bytes.Buffer
	p, err := newProxy(t, cfg, Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs}, &slog.HandlerOptions{Level: slog.LevelDebug})), Books: books})
	if err != nil {
		t.Fatal(err)
	}
	stop := (&Server{Proxy: p, Admin: adminLn, AdminHandler: p.AdminHandler(nil)}).Start(apiLn)
	defer stop()
	api, admin := "http://"+apiLn.Addr().String(), "http://"+adminLn.Addr().String()
	for _, key := range []string{"sk-test", "sk-test", "sk-other"} {
		req, _ := http.NewRequest(http.MethodPost, api+"/v1/messages", strings.NewReader(requestJSON))
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	var pages []string
	for _, c := range []struct {
		key    string
		bearer bool
		want   int
	}{{"", false, 401}, {"admin-key-wrong", false, 401}, {testAdminKey + "x", true, 401}, {testAdminKey, false, 200}, {testAdminKey, true, 200}} {
		code, hdr, body := adminGet(t, admin, "/admin/spend", c.key, c.bearer)
		pages = append(pages, body)
		if code != c.want {
			t.Errorf("key %q: %d %s, want %d", c.key, code, body, c.want)
		}
		if code == 401 {
			if e, ok := apierror.Decode([]byte(body)); !ok || e.Error.Type != "authentication_error" || hdr.Get("Request-Id") == "" {
				t.Errorf("401 not Anthropic-shaped: %s", body)
			}
		}
	}

	var page struct {
		Data     []spendstore.Line `json:"data"`
		HasMore  bool              `json:"has_more"`
		NextPage string            `json:"next_page"`
		Store    struct{ Where string }
	}
	_, _, body := adminGet(t, admin, "/admin/spend?period=week&limit=1", testAdminKey, false)
	pages = append(pages, body)
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Data) != 1 || !page.HasMore || page.NextPage != "1" || page.Store.Where != "memory" {
		t.Fatalf("first page: %v %s", err, body)
	}
	// sk-test's two answers first: the most spent. 12 input and 4 output
	// tokens of Sonnet 4.5 each, $96 a million answers.
	first := page.Data[0]
	if first.Key != testKeyHash || first.Tokens != 32 || first.Answers != 2 || math.Abs(first.USD-2*96e-6) > 1e-12 || first.Model != "claude-sonnet-4-5" {
		t.Errorf("first line %+v", first)
	}
	_, _, body = adminGet(t, admin, "/admin/spend?period=week&limit=1&page="+page.NextPage, testAdminKey, false)
	pages = append(pages, body)
	page.Data, page.HasMore = nil, true
	if json.Unmarshal([]byte(body), &page); len(page.Data) != 1 || page.HasMore || page.Data[0].Answers != 1 {
		t.Errorf("second page: %s", body)
	}
	_, _, body = adminGet(t, admin, "/admin/spend?key="+testKeyHash, testAdminKey, false)
	if json.Unmarshal([]byte(body), &page); len(page.Data) != 1 || page.Data[0].Key != testKeyHash {
		t.Errorf("by key: %s", body)
	}

	code, hdr, body := adminGet(t, admin, "/admin/spend?format=csv&period=all", testAdminKey, false)
	pages = append(pages, body)
	rows, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/csv") || err != nil || len(rows) != 3 || rows[0][0] != "period" || rows[1][1] == "" || rows[1][5] != "0.000192" {
		t.Errorf("CSV: %d %v %v %q", code, hdr, err, rows)
	}

	_, _, body = adminGet(t, admin, "/admin/budgets", testAdminKey, false)
	pages = append(pages, body)
	var budgets struct{ Data []budget.Status }
	if err := json.Unmarshal([]byte(body), &budgets); err != nil || len(budgets.Data) != 1 || budgets.Data[0].Spent != 32 || budgets.Data[0].Limit != 1000 || budgets.Data[0].Reset.IsZero() {
		t.Errorf("budgets: %v %s", err, body)
	}
	_, _, body = adminGet(t, admin, "/admin/budgets?format=csv", testAdminKey, false)
	if !strings.HasPrefix(body, "name,tenant,key,unit,period,time_zone,limit,warn_at,spent") || !strings.Contains(body, ",32,") {
		t.Errorf("budgets CSV: %s", body)
	}
	if code, _, body := adminGet(t, admin, "/admin/spend?period=fortnight", testAdminKey, false); code != 400 || !strings.Contains(body, "fortnight") {
		t.Errorf("a bad period: %d %s", code, body)
	}

	// The API port serves none of it, and relays none of it.
	for _, path := range []string{"/admin/spend", "/admin/budgets"} {
		code, _, body := adminGet(t, api, path, testAdminKey, false)
		if code != 404 || !strings.Contains(body, "admin listener") {
			t.Errorf("API port %s: %d %s", path, code, body)
		}
	}
	seen.mu.Lock()
	for _, path := range seen.paths {
		if strings.HasPrefix(path, "/admin") {
			t.Errorf("the upstream was asked for %s", path)
		}
	}
	seen.mu.Unlock()

	_, _, metrics := adminGet(t, admin, "/metrics", "", false)
	logMu.Lock()
	pages = append(pages, metrics, logs.String())
	logMu.Unlock()
	for _, text := range pages {
		if strings.Contains(text, testAdminKey) || strings.Contains(text, "sk-test") || strings.Contains(text, "sk-other") {
			t.Errorf("a secret shown: %s", text)
		}
	}
}

// Without ADMIN_KEY the admin API is off (404 that says so), and config
// refuses ADMIN_KEY without an admin listener.
func TestAdminAPIOffWithoutKey(t *testing.T) {
	up := startUpstream(t, apiHandler)
	cfg := testConfig(t, up.URL, false)
	cfg.AdminListenAddr = "127.0.0.1:0"
	p, err := newProxy(t, cfg, Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	adminLn, _ := net.Listen("tcp", "127.0.0.1:0")
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	stop := (&Server{Proxy: p, Admin: adminLn, AdminHandler: p.AdminHandler(nil)}).Start(apiLn)
	defer stop()
	if code, _, body := adminGet(t, "http://"+adminLn.Addr().String(), "/admin/spend", "anything", false); code != 404 || !strings.Contains(body, "ADMIN_KEY") {
		t.Errorf("without ADMIN_KEY: %d %s", code, body)
	}
	bad := config.Default()
	bad.AdminKey = testAdminKey
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "ADMIN_LISTEN_ADDR") || strings.Contains(err.Error(), testAdminKey) {
		t.Errorf("ADMIN_KEY without ADMIN_LISTEN_ADDR: %v", err)
	}
}
