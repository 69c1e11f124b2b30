package proxy

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/config"
	recording "github.com/sluicehq/sluice/record"
)

// A recording sluice writes each Messages request's shape, its answer's
// rate limits and usage, and none of the request's text, its key or a
// tenant named by a header: a distinctive secret sent in every part of
// the requests is nowhere in the file.
func TestRecordingHoldsNoPromptText(t *testing.T) {
	const secret = "zq7-SECRET-xk4"
	bothModes(t, func(t *testing.T, windowed bool) {
		up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Anthropic-Ratelimit-Input-Tokens-Limit", "400000")
			w.Header().Set("Anthropic-Ratelimit-Requests-Limit", "4000")
			apiHandler(w, r)
		})
		path := filepath.Join(t.TempDir(), "rec.jsonl")
		rc, err := recording.Open(recording.Config{Path: path, MaxBytes: 1 << 20, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t, up.URL, windowed, func(c *config.Config) { c.TenantFrom = config.TenantFromHeader })
		p, err := newProxy(t, cfg, Options{Logger: quietLog, Recorder: rc, ParkWhenQueued: -1})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		stop := (&Server{Proxy: p}).Start(ln)
		base := "http://" + ln.Addr().String()
		bodies := []string{
			`{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,"system":[{"type":"text","text":"` + secret + ` system","cache_control":{"type":"ephemeral"}}],` +
				`"tools":[{"name":"` + secret + `","description":"` + secret + `","input_schema":{"type":"object"}}],` +
				`"messages":[{"role":"user","content":"` + secret + ` question"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"` + secret + `","input":{"q":"` + secret + `"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"` + secret + `"}]}],"metadata":{"user_id":"` + secret + `"}}`,
			`{"model":"claude-sonnet-4-5","max_tokens":32,"system":"` + secret + `","messages":[{"role":"user","content":[{"type":"text","text":"` + secret + `"}]}]}`,
		}
		for _, b := range bodies {
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(b))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Api-Key", "sk-ant-"+secret)
			req.Header.Set("X-Sluice-Tenant", secret)
			req.Header.Set("Anthropic-Version", "2023-06-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
		}
		stop()
		rc.Close() // as sluice serve does, after the drain: the answers above are all accounted
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(bytes.ToLower(raw), []byte("secret")) {
			t.Fatalf("the recording holds the secret:\n%s", raw)
		}
		rec, err := recording.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Requests) != 2 {
			t.Fatalf("%d requests recorded; want 2", len(rec.Requests))
		}
		// Not in order of arrival necessarily: by their max_tokens.
		for _, r := range rec.Requests {
			want := map[int]int{64: 5, 32: 2}[r.MaxTokens]
			if len(r.Blocks) != want || r.Status != 200 || r.Tenant == "" || r.Key == "" {
				t.Errorf("recorded %+v; want %d blocks, status 200, tenant and key hashes", r, want)
			}
			if r.Limits == nil || r.Limits.InputTokens != 400000 || r.Usage == nil || r.Usage.Output == 0 {
				t.Errorf("limits %+v, usage %+v; want the answer's", r.Limits, r.Usage)
			}
		}
	})
}
