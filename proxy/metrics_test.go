package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
)

func TestMetricsCountRequestsTokensAndFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newBubbleRig(t, true, apiHandler)
		for _, body := range []string{requestJSON, streamRequestJSON} {
			resp, err := rig.post(t, context.Background(), body)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		resp, err := rig.client.Get(rig.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		text := readAll(t, resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			`sluice_requests_total{mode="windowed",route="messages",status="200"} 2`,
			// messageJSON: 12 in, 4 out; sseEvents: 25 in, 15 out (the last message_delta).
			`sluice_tokens_total{kind="input",model="claude-sonnet-4-5"} 37`,
			`sluice_tokens_total{kind="output",model="claude-sonnet-4-5"} 19`,
			`sluice_window_flushes_total{reason="age"} 2`,
			`sluice_gate_capacity_requests 8`,
			`sluice_gate_in_flight_requests 0`,
			`sluice_queue_depth_requests 0`,
			`sluice_queue_capacity_requests 1024`,
			`sluice_body_budget_capacity_bytes 2.68435456e+08`,
			`sluice_upstream_duration_seconds_count{stream="true"} 1`,
			`sluice_slot_wait_seconds_count 2`,
		} {
			if !strings.Contains(text, want+"\n") {
				t.Errorf("/metrics lacks %q", want)
			}
		}
		if t.Failed() {
			t.Log(text)
		}
	})
}

func TestAccessLogHasIDsAndNoSecrets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var mu syncWriter
		mu.w = &buf
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if r.Header.Get("Authorization") != "" { // the v2 SDK's style: fail once, then succeed
				w.Header().Set("Request-Id", "req_upstream_err")
				w.WriteHeader(529)
				return
			}
			writeMessage(w)
		})
		rig.proxy.log = slog.New(slog.NewJSONHandler(&mu, nil))
		const secretBody = `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"TOP-SECRET-PROMPT"}]}`
		var ids []string
		for _, auth := range []string{"x-api-key", "bearer"} {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, rig.url+"/v1/messages", strings.NewReader(secretBody))
			if auth == "bearer" {
				req.Header.Set("Authorization", "Bearer sk-ant-SECRET-BEARER")
			} else {
				req.Header.Set("X-Api-Key", "sk-ant-SECRET-KEY")
			}
			resp, err := rig.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.Header.Get(sluiceIDHeader) == "" {
				t.Error("no sluice request id header")
			}
			ids = append(ids, resp.Header.Get(sluiceIDHeader))
		}
		// The access line is written once the answer is out (see
		// deliver): let the handlers finish.
		synctest.Wait()
		out := buf.String()
		lines := accessLines(out)
		for _, id := range ids {
			if n := len(lines[id]); n != 1 {
				t.Errorf("%d access lines for %s; want exactly one", n, id)
			}
		}
		for _, secret := range []string{"SECRET-KEY", "SECRET-BEARER", "TOP-SECRET-PROMPT", "sk-ant"} {
			if strings.Contains(out, secret) {
				t.Errorf("the log contains %q:\n%s", secret, out)
			}
		}
		for _, want := range []string{`"upstream_request_id":"req_upstream_1"`, `"model":"claude-sonnet-4-5"`, `"status":200`, `"status":529`, `"retries":2`, `"wave":1`, `"id":"req_sluice_`} {
			if !strings.Contains(out, want) {
				t.Errorf("the log lacks %s:\n%s", want, out)
			}
		}
	})
}

// syncWriter serialises writes from concurrent handlers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
