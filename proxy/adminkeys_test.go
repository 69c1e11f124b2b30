package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/keystore"
	"github.com/sluicehq/sluice/spendstore"
)

func adminDo(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	req.Header.Set("X-Sluice-Actor", "tester")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The admin API's keys and budgets: a key made is shown once and taken at
// once, revoked is refused at once; bad input is a clear 4xx, Anthropic-
// shaped; a key of the keys file and a budget of the config file cannot
// be shadowed; without ADMIN_KEY nothing changes; and neither a key made
// nor the admin key reaches the log.
func TestAdminKeys(t *testing.T) {
	s := startSim(t)
	keysFile := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, keysFile, keyEntry("filed", ""))
	in, err := LoadInbound(InboundOptions{KeysFile: keysFile, UpstreamKey: heldKey})
	if err != nil {
		t.Fatal(err)
	}
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	adminLn, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg := testConfig(t, simURL(s), false, withBudget(budget.Spec{Name: "from-file", Tenant: "t", Unit: budget.USD, Limit: 1, Period: budget.Day}))
	cfg.AdminListenAddr, cfg.AdminKey = adminLn.Addr().String(), testAdminKey
	cfg.OIDCIssuer, cfg.OIDCAudience = "https://idp.example.com", "sluice" // group budgets need it; nothing here asks the provider
	books, err := spendstore.Open(false, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer books.Close()
	var logs bytes.Buffer
	var p *Proxy
	var y *keystore.Sync
	cfg.InboundKeysStore, cfg.SpendStore = true, config.SpendStoreSQLite // the books opened above stand in
	p, err = newProxy(t, cfg, Options{Logger: slog.New(slog.NewTextHandler(lockedWriter{&logs}, nil)), Books: books, Inbound: in, Keys: books,
		KeysChanged: func() { y.Now(t.Context()) }})
	if err != nil {
		t.Fatal(err)
	}
	set := p.budgets
	y, err = keystore.Start(books, func(keys []keystore.Key, specs []budget.Spec) {
		in.UseStored(keys)
		if err := set.Replace(append(cfg.Budgets, specs...), books); err != nil {
			t.Error(err)
		}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Stop()
	stop := (&Server{Proxy: p, Admin: adminLn, AdminHandler: p.AdminHandler(nil)}).Start(apiLn)
	defer stop()
	api, admin := "http://"+apiLn.Addr().String(), "http://"+adminLn.Addr().String()

	for _, c := range []struct {
		method, path, key, body string
		want                    int
		typ                     string
	}{
		{"POST", "/admin/keys", "", `{"name":"x"}`, 401, "authentication_error"},
		{"POST", "/admin/keys", testAdminKey + "x", `{"name":"x"}`, 401, "authentication_error"},
		{"POST", "/admin/keys", testAdminKey, `{"name":"x","key":"sk-chosen"}`, 400, "invalid_request_error"},
		{"POST", "/admin/keys", testAdminKey, `{"name":"a b"}`, 400, "invalid_request_error"},
		{"POST", "/admin/keys", testAdminKey, `{"name":"x","class":"urgent"}`, 400, "invalid_request_error"},
		{"POST", "/admin/keys", testAdminKey, `{"name":"x","weight":-1}`, 400, "invalid_request_error"},
		{"POST", "/admin/keys", testAdminKey, `not json`, 400, "invalid_request_error"},
		{"POST", "/admin/keys", testAdminKey, `{"name":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "request_too_large"},
		{"POST", "/admin/keys", testAdminKey, `{"name":"filed"}`, 409, "invalid_request_error"},
		// A tenant that would break or spoof a metric label, a log line or
		// the books; a second object that would be ignored.
		{"POST", "/admin/keys", testAdminKey, `{"name":"t1","tenant":"a\nb"}`, 400, "invalid_request_error"},
		{"POST", "/admin/keys", testAdminKey, `{"name":"t2","tenant":" "}`, 400, "invalid_request_error"},
		{"POST", "/admin/keys", testAdminKey, `{"name":"t3","tenant":"` + strings.Repeat("x", 5000) + `"}`, 400, "invalid_request_error"},
		{"POST", "/admin/keys", testAdminKey, `{"name":"t4"} {"name":"t5"}`, 400, "invalid_request_error"},
		{"DELETE", "/admin/keys/nobody", testAdminKey, ``, 404, "not_found_error"},
		{"PUT", "/admin/budgets/b", testAdminKey, `{"scope":"team","target":"x","usd":1,"period":"day"}`, 400, "invalid_request_error"},
		{"PUT", "/admin/budgets/b", testAdminKey, `{"scope":"key","target":"nobody","usd":1,"period":"day"}`, 400, "invalid_request_error"},
		{"PUT", "/admin/budgets/b", testAdminKey, `{"scope":"tenant","target":"t","usd":1,"tokens":5,"period":"day"}`, 400, "invalid_request_error"},
		{"PUT", "/admin/budgets/b", testAdminKey, `{"scope":"tenant","target":"t","usd":1,"period":"fortnight"}`, 400, "invalid_request_error"},
		{"PUT", "/admin/budgets/from-file", testAdminKey, `{"scope":"tenant","target":"t","usd":1,"period":"day"}`, 409, "invalid_request_error"},
		{"PUT", "/admin/budgets/b", testAdminKey, `{"scope":"group","usd":1,"period":"day"}`, 400, "invalid_request_error"},
		{"PUT", "/admin/budgets/b", testAdminKey, `{"scope":"group","target":"*","usd":1,"period":"day"}`, 400, "invalid_request_error"},
		{"PUT", "/admin/budgets/b", testAdminKey, `{"scope":"group","target":"contractors","group":"x","usd":1,"period":"day"}`, 400, "invalid_request_error"},
		{"GET", "/admin/audit?limit=0", testAdminKey, ``, 400, "invalid_request_error"},
	} {
		code, body := adminDo(t, c.method, admin+c.path, c.key, c.body)
		e, ok := apierror.Decode([]byte(body))
		if code != c.want || !ok || e.Error.Type != c.typ {
			t.Errorf("%s %s %.60s: %d %s, want %d %s", c.method, c.path, c.body, code, body, c.want, c.typ)
		}
	}

	code, body := adminDo(t, "POST", admin+"/admin/keys", testAdminKey, `{"name":"dev","tenant":"team","models":["claude-*"]}`)
	var made struct{ Key string }
	if code != 201 || json.Unmarshal([]byte(body), &made) != nil || !strings.HasPrefix(made.Key, "sk-sluice-") {
		t.Fatalf("create: %d %s", code, body)
	}
	msg := func(key string) int {
		req, _ := http.NewRequest("POST", api+"/v1/messages", strings.NewReader(requestJSON))
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := msg(made.Key); st != 200 {
		t.Errorf("the key just made: %d", st)
	}
	if st := msg(sluiceKey("filed")); st != 200 {
		t.Errorf("the keys file's key beside the store's: %d", st)
	}
	if code, body := adminDo(t, "PATCH", admin+"/admin/keys/dev", testAdminKey, `{"models":["claude-haiku-*"]}`); code != 200 {
		t.Errorf("update: %d %s", code, body)
	}
	if st := msg(made.Key); st != 403 { // requestJSON names another model
		t.Errorf("after its models changed: %d, want 403", st)
	}
	if code, body := adminDo(t, "PUT", admin+"/admin/budgets/dev-day", testAdminKey, `{"scope":"key","target":"dev","tokens":1000,"period":"day"}`); code != 201 {
		t.Errorf("budget put: %d %s", code, body)
	}
	if code, body := adminDo(t, "PUT", admin+"/admin/budgets/contractors-day", testAdminKey, `{"scope":"group","target":"contractors","usd":5,"period":"day"}`); code != 201 {
		t.Errorf("a group's budget put: %d %s", code, body)
	}
	if _, b := adminDo(t, "GET", admin+"/admin/budgets", testAdminKey, ""); !strings.Contains(b, `"dev-day"`) ||
		!strings.Contains(b, `"name":"contractors-day","group":"contractors","members":0`) {
		t.Errorf("GET /admin/budgets lacks a budget put: %s", b)
	}
	if code, _ := adminDo(t, "DELETE", admin+"/admin/keys/dev", testAdminKey, ""); code != 200 {
		t.Errorf("revoke: %d", code)
	}
	if st := msg(made.Key); st != 401 {
		t.Errorf("the revoked key: %d, want 401", st)
	}
	if code, _ := adminDo(t, "PATCH", admin+"/admin/keys/dev", testAdminKey, `{"tenant":"x"}`); code != 409 {
		t.Errorf("changing a revoked key: %d, want 409", code)
	}
	_, body = adminDo(t, "GET", admin+"/admin/audit", testAdminKey, "")
	var audit struct{ Data []keystore.Numbered }
	json.Unmarshal([]byte(body), &audit)
	if len(audit.Data) != 5 || audit.Data[0].Action != "key.revoke" || !strings.HasPrefix(audit.Data[0].Who, "tester from 127.0.0.1") {
		t.Errorf("audit: %s", body)
	}
	_, list := adminDo(t, "GET", admin+"/admin/keys", testAdminKey, "")
	stop() // the access log's last lines written
	waitForServerLinger()
	for _, secret := range []string{made.Key, testAdminKey, heldKey} {
		if strings.Contains(logs.String(), secret) || strings.Contains(list, secret) || strings.Contains(body, secret) {
			t.Errorf("a secret reached the log, the list or the audit")
		}
	}
	if !strings.Contains(logs.String(), "admin: key.create") {
		t.Error("the log does not say a key was made")
	}
}
