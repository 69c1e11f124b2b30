package proxy

// Label values of the metrics, which come from clients.

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
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

// An upstream that names a new model in every answer does not grow
// sluice_tokens_total without end: past maxTokenModels models, the rest
// count as "other".
func TestTokenModelsAreBounded(t *testing.T) {
	var n atomic.Int32
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":"model-%d","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}`, n.Add(1))
	})
	_, px := startProxy(t, testConfig(t, up.URL, false))
	const answers = maxTokenModels + 36
	for range answers {
		resp := post(t, px.URL, "/v1/messages", requestJSON)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	resp, err := http.Get(px.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	models := map[string]bool{}
	var other float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, `sluice_tokens_total{kind="input"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `model="`)
		model, value, _ := strings.Cut(rest, `"} `)
		models[model] = true
		if model == "other" {
			other, _ = strconv.ParseFloat(value, 64)
		}
	}
	if len(models) != maxTokenModels+1 || other != 3*36 {
		t.Errorf("sluice_tokens_total has %d model values, %v input tokens as other; want %d and the last 36 answers' 108", len(models), other, maxTokenModels+1)
	}
}
