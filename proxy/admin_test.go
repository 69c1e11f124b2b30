package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAdminListenerTakesTheMetricsAndThePageOffTheAPIPort(t *testing.T) {
	seen := &upstreamSeen{}
	up := startUpstream(t, seen.handler)
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	adminLn, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg := testConfig(t, up.URL, true)
	cfg.AdminListenAddr = adminLn.Addr().String()
	cfg.PublicURL = &url.URL{Scheme: "http", Host: apiLn.Addr().String()}
	p, err := newProxy(t, cfg, Options{Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the page at "+r.URL.Path) })
	stop := (&Server{Proxy: p, Admin: adminLn, AdminHandler: p.AdminHandler(page)}).Start(apiLn)
	defer stop()
	api, admin := "http://"+apiLn.Addr().String(), "http://"+adminLn.Addr().String()

	for _, path := range []string{"/metrics", "/ui/", "/ui", "/ui/api/live", "/ui/api/run"} {
		status, body := get(t, api+path)
		if status != 404 || !strings.Contains(body, `"not_found_error"`) || !strings.Contains(body, "ADMIN_LISTEN_ADDR") {
			t.Errorf("API port, GET %s: %d %s; want a 404 not_found_error pointing at the admin listener", path, status, body)
		}
	}
	if _, body := get(t, api+"/"); strings.Contains(body, "/metrics") || strings.Contains(body, "/ui/") {
		t.Errorf("API port, GET /: %s; want no pointer to what it does not serve", body)
	}
	if status, _ := get(t, api+"/v1/models"); status != 200 {
		t.Errorf("API port, GET /v1/models: %d; want it relayed", status)
	}

	if status, body := get(t, admin+"/metrics"); status != 200 || !strings.Contains(body, "sluice_requests_total") {
		t.Errorf("admin, GET /metrics: %d %.100s; want the metrics", status, body)
	}
	for _, path := range []string{"/ui/", "/ui/api/live"} {
		if status, body := get(t, admin+path); status != 200 || body != "the page at "+path {
			t.Errorf("admin, GET %s: %d %s; want the page", path, status, body)
		}
	}
	if status, _ := get(t, admin+"/readyz"); status != 200 {
		t.Errorf("admin, GET /readyz: %d", status)
	}
	before := seen.count()
	for _, path := range []string{"/v1/models", "/v1/messages"} {
		if status, body := get(t, admin+path); status != 404 || !strings.Contains(body, "LISTEN_ADDR") {
			t.Errorf("admin, GET %s: %d %s; want a 404 pointing at LISTEN_ADDR", path, status, body)
		}
	}
	conn := rawRequest(t, adminLn.Addr().String(), "GET http://example.com/metrics HTTP/1.1\r\nHost: example.com", "")
	resp, body := readAnswer(t, conn, bufio.NewReader(conn))
	wantErrorAnswer(t, resp, body, 400, "invalid_request_error", "not a forward proxy")
	if seen.count() != before {
		t.Error("the admin listener relayed a request upstream")
	}
}
