package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/request"
)

// A JSON access line gives durations in milliseconds with the unit in the
// key, to the microsecond; the client's TCP address, never what it claims
// in X-Forwarded-For; and the body bytes in and out, on each way through
// sluice: plain, windowed (parked), relayed.
func TestAccessLineGivesMillisecondsClientAndBytes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		windowed bool
		path     string
		body     string
	}{
		{"plain", false, "/v1/messages", requestJSON},
		{"windowed", true, "/v1/messages", requestJSON},
		{"windowed stream", true, "/v1/messages", streamRequestJSON},
		{"relayed", false, "/v1/messages/count_tokens", requestJSON},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				time.Sleep(20 * time.Millisecond)
				apiHandler(w, r)
			})
			var buf bytes.Buffer
			sw := &syncWriter{w: &buf}
			log := slog.New(slog.NewJSONHandler(sw, nil))
			_, px := startProxyWith(t, testConfig(t, up.URL, tc.windowed, func(c *config.Config) { c.MaxWait = 0 }), Options{Logger: log})

			var local string
			ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
				GotConn: func(ci httptrace.GotConnInfo) { local = ci.Conn.LocalAddr().String() }})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, px.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Api-Key", "sk-test")
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, answer)
			}

			line, all := accessLine(t, sw, &buf, resp.Header.Get(sluiceIDHeader))
			for _, gone := range []string{"queue_wait", "upstream_time", "took"} {
				if _, ok := line[gone]; ok {
					t.Errorf("the line still has %q: %v", gone, line)
				}
			}
			if line["client_addr"] != local || strings.Contains(all, "203.0.113.9") {
				t.Errorf("client_addr = %v; want the TCP peer %s, never X-Forwarded-For", line["client_addr"], local)
			}
			if got := line["bytes_in"]; got != float64(len(tc.body)) {
				t.Errorf("bytes_in = %v; want %d", got, len(tc.body))
			}
			if got := line["bytes_out"]; got != float64(len(answer)) {
				t.Errorf("bytes_out = %v; want the %d body bytes the client got", got, len(answer))
			}
			upMS, _ := line["upstream_ms"].(float64)
			durMS, _ := line["duration_ms"].(float64)
			qMS, ok := line["queue_wait_ms"].(float64)
			if !ok || durMS < upMS || durMS < qMS || durMS < 20 || durMS > 10_000 {
				t.Errorf("queue_wait_ms %v, upstream_ms %v, duration_ms %v; want milliseconds, the whole at least its parts and the upstream's 20",
					line["queue_wait_ms"], line["upstream_ms"], line["duration_ms"])
			}
			if tc.path == "/v1/messages" && upMS < 20 {
				t.Errorf("upstream_ms = %v; want at least the upstream's 20 ms", upMS)
			}
			for _, k := range []string{"queue_wait_ms", "upstream_ms", "duration_ms"} {
				v, _ := line[k].(float64)
				if us := v * 1000; math.Abs(us-math.Round(us)) > 1e-6 {
					t.Errorf("%s = %v; want whole microseconds", k, v)
				}
			}
			for _, k := range []string{"id", "upstream_request_id", "method", "path", "route", "mode", "tenant", "model", "stream", "status", "wave", "retries"} {
				if _, ok := line[k]; !ok {
					t.Errorf("the line lacks %q: %v", k, line)
				}
			}
			if want := request.Tenant(req.Header); tc.path == "/v1/messages" && line["tenant"] != want {
				t.Errorf("tenant = %v; want the key's hash %s", line["tenant"], want)
			}
			if strings.Contains(all, "sk-test") {
				t.Error("the API key reached the log")
			}
		})
	}
}

// accessLine waits for the access line of the request with sluice id id
// in buf, which sw writes (see waitLogged), and returns it and the whole
// log.
func accessLine(t *testing.T, sw *syncWriter, buf *bytes.Buffer, id string) (map[string]any, string) {
	t.Helper()
	all := waitLogged(t, func() string {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		return buf.String()
	}, id)
	return accessLines(all)[id][0], all
}

// waitLogged waits, for at most 10 s, until the JSON log that read
// returns holds an access line for each of ids, and returns the log. The
// line is written once the answer is on its way to the client (see
// deliver), so it may come just after the client has it.
func waitLogged(t *testing.T, read func() string, ids ...string) string {
	t.Helper()
	var all string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		all = read()
		lines := accessLines(all)
		missing := false
		for _, id := range ids {
			if len(lines[id]) == 0 {
				missing = true
			}
		}
		if !missing {
			return all
		}
	}
	t.Fatalf("no access line for some of %v in:\n%s", ids, all)
	return ""
}

// accessLines is every access line of a JSON log, by sluice request id.
func accessLines(log string) map[string][]map[string]any {
	out := map[string][]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "request" {
			id, _ := m["id"].(string)
			out[id] = append(out[id], m)
		}
	}
	return out
}
