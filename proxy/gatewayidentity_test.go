package proxy

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/dispatch/tenants"
)

// Under TENANT_FROM=gateway the developer Anthropic's gateway names is
// the request's tenant, on both paths; and the gateway's identity headers
// never reach the upstream, on a Messages request or a relayed one,
// whatever TENANT_FROM is (the gateway refuses to send developers' emails
// to Anthropic itself).
func TestGatewayIdentityNamesTenantAndStopsHere(t *testing.T) {
	identity := map[string]string{
		tenants.GatewayUserEmailHeader: "ana%C3%AF@example.com", // the gateway's encoding of anaï@example.com
		tenants.GatewayUserIDHeader:    "sub-ana",
		tenants.LiteLLMEndUserHeader:   "ana%C3%AF@example.com",
	}
	for _, from := range []config.TenantFrom{config.TenantFromGateway, config.TenantFromKey} {
		t.Run(from.String(), func(t *testing.T) {
			bothModes(t, func(t *testing.T, windowed bool) {
				var mu sync.Mutex
				var seen []http.Header
				up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					seen = append(seen, r.Header.Clone())
					mu.Unlock()
					io.Copy(io.Discard, r.Body)
					apiHandler(w, r)
				})
				var buf bytes.Buffer
				sw := &syncWriter{w: &buf}
				cfg := testConfig(t, up.URL, windowed, func(c *config.Config) { c.TenantFrom = from })
				_, px := startProxyWith(t, cfg, Options{Logger: slog.New(slog.NewJSONHandler(sw, nil))})
				var ids []string
				for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
					req, _ := http.NewRequest(http.MethodPost, px.URL+path, strings.NewReader(requestJSON))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Api-Key", "sk-gateway-held")
					for k, v := range identity {
						req.Header.Set(k, v)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Fatalf("%s: status %d: %s", path, resp.StatusCode, body)
					}
					if path == "/v1/messages" {
						ids = append(ids, resp.Header.Get(sluiceIDHeader))
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if len(seen) != 2 {
					t.Fatalf("the upstream saw %d requests; want 2", len(seen))
				}
				for i, h := range seen {
					for name := range identity {
						if v := h.Get(name); v != "" {
							t.Errorf("request %d: the upstream saw %s: %q", i, name, v)
						}
					}
				}
				all := waitLogged(t, func() string { sw.mu.Lock(); defer sw.mu.Unlock(); return buf.String() }, ids...)
				tenant := accessLines(all)[ids[0]][0]["tenant"]
				if want := "anaï@example.com"; (from == config.TenantFromGateway) != (tenant == want) {
					t.Errorf("TENANT_FROM=%s: the access line's tenant is %v (the gateway's developer is %q)", from, tenant, want)
				}
			})
		})
	}
}
