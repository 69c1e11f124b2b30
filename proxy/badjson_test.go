package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sluicehq/sluice/sim"
)

// TestInvalidJSONAnswerIs502AndCounted: a 200 whose body does not parse
// (the simulator's bad-json fault cuts it in half) reaches the client as a
// 502 api_error, windowed and plain, and counts in
// sluice_upstream_invalid_json_total; a valid answer does not count.
func TestInvalidJSONAnswerIs502AndCounted(t *testing.T) {
	for _, windowed := range []bool{true, false} {
		t.Run(map[bool]string{true: "windowed", false: "plain"}[windowed], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := sim.New(sim.Config{})
				t.Cleanup(s.Close)
				rig := newBubbleRig(t, windowed, s.ServeHTTP)
				for _, fault := range []string{"bad-json", "bad-json", ""} {
					req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, rig.url+"/v1/messages", strings.NewReader(requestJSON))
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set("X-Api-Key", "sk-test")
					req.Header.Set("Anthropic-Version", "2023-06-01")
					req.Header.Set("X-Sim-Fault", fault)
					resp, err := rig.client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					if fault == "" {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != 200 {
							t.Errorf("valid answer: status %d; want 200", resp.StatusCode)
						}
						continue
					}
					e := decodeError(t, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusBadGateway || e.Error.Type != "api_error" || !strings.Contains(e.Error.Message, "not valid JSON") {
						t.Errorf("bad JSON: %d %+v; want 502 api_error saying the body was not valid JSON", resp.StatusCode, e)
					}
				}
				resp, err := rig.client.Get(rig.url + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				text := readAll(t, resp.Body)
				resp.Body.Close()
				if want := "sluice_upstream_invalid_json_total 2\n"; !strings.Contains(text, want) {
					t.Errorf("/metrics lacks %q", want)
				}
			})
		})
	}
}
