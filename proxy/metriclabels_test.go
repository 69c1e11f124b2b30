package proxy

// Label values of the metrics, which come from clients.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
)

// Tenant names are label values of the metrics, which must be UTF-8: a
// name that was not (a TENANT_FROM=header name of bytes 0x80-0xff, which
// a header value may carry, or a header name or metadata.user_id cut at
// its byte bound in the middle of a character) made every scrape of
// /metrics fail with 500 and a stack trace, for as long as the tenant
// was tracked.
func TestTenantNamesNeverBreakTheMetrics(t *testing.T) {
	for _, tc := range []struct {
		from           config.TenantFrom
		header, userID string
	}{
		{config.TenantFromHeader, "team-\xff", ""},
		{config.TenantFromHeader, strings.Repeat("a", 255) + "é", ""},
		{config.TenantFromMetadata, "", strings.Repeat("u", 255) + "é"},
	} {
		t.Run(tc.from.String(), func(t *testing.T) {
			up := startUpstream(t, apiHandler)
			_, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) { c.TenantFrom = tc.from }))
			body := requestJSON
			if tc.userID != "" {
				body = strings.Replace(body, `"max_tokens"`, fmt.Sprintf(`"metadata":{"user_id":%q},"max_tokens"`, tc.userID), 1)
			}
			req, _ := http.NewRequest("POST", px.URL+"/v1/messages", strings.NewReader(body))
			req.Header.Set("X-Api-Key", "sk-test")
			if tc.header != "" {
				req.Header.Set("X-Sluice-Tenant", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp.Body)
			resp.Body.Close()
			m, err := http.Get(px.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			defer m.Body.Close()
			if b := readAll(t, m.Body); m.StatusCode != http.StatusOK {
				t.Errorf("GET /metrics after a request of that tenant: %d %.200s; want 200", m.StatusCode, b)
			}
		})
	}
}
