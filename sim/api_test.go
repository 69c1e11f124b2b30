package sim

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRequestErrors(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	tests := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		typ, msg                 string
	}{
		{"no credentials", "POST", "/v1/messages", helloBody, []string{"x-api-key", ""}, 401, "authentication_error", "x-api-key"},
		{"empty bearer", "POST", "/v1/messages", helloBody, []string{"x-api-key", "", "Authorization", "Bearer "}, 401, "authentication_error", "Bearer"},
		{"unknown path", "GET", "/v1/nothing", "", nil, 404, "not_found_error", "/v1/nothing"},
		{"wrong method", "GET", "/v1/messages", "", nil, 405, "invalid_request_error", "POST"},
		{"not json", "POST", "/v1/messages", "{nope", nil, 400, "invalid_request_error", "not valid JSON"},
		{"empty body", "POST", "/v1/messages", "", nil, 400, "invalid_request_error", "empty"},
		{"no model", "POST", "/v1/messages", `{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request_error", "model"},
		{"no max_tokens", "POST", "/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request_error", "max_tokens"},
		{"huge max_tokens", "POST", "/v1/messages", `{"model":"m","max_tokens":999999999,"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request_error", "max_tokens"},
		{"empty messages", "POST", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[]}`, nil, 400, "invalid_request_error", "messages"},
		{"bad role", "POST", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"bot","content":"x"}]}`, nil, 400, "invalid_request_error", "role"},
		{"tool_choice without tools", "POST", "/v1/messages", `{"model":"m","max_tokens":5,"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"x"}]}`, nil, 400, "invalid_request_error", "tools"},
		{"five breakpoints", "POST", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[` +
			strings.Repeat(`{"type":"text","text":"a","cache_control":{"type":"ephemeral"}},`, 4) +
			`{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}]}`, nil, 400, "invalid_request_error", "maximum of 4"},
		{"unknown batch", "GET", "/v1/messages/batches/msgbatch_x", "", nil, 404, "not_found_error", "msgbatch_x"},
		{"unknown model", "GET", "/v1/models/claude-nope", "", nil, 404, "not_found_error", "claude-nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, call(s, tt.method, tt.path, tt.body, tt.hdr...), tt.status, tt.typ, tt.msg)
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	big := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 33<<20) + `"}]}`
	wantError(t, call(s, "POST", "/v1/messages", big), 413, "request_too_large", "32 MB")
}

func TestBearerAndBetaQuery(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	w := call(s, "POST", "/v1/messages?beta=true", helloBody, "x-api-key", "", "Authorization", "Bearer k", "anthropic-version", "2026-10-21")
	if w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
}

func TestDeterministicReplies(t *testing.T) {
	a, b, c := New(Config{Seed: 1}), New(Config{Seed: 1}), New(Config{Seed: 2})
	defer a.Close()
	defer b.Close()
	defer c.Close()
	ra, rb, rc := decode(t, call(a, "POST", "/v1/messages", helloBody)), decode(t, call(b, "POST", "/v1/messages", helloBody)), decode(t, call(c, "POST", "/v1/messages", helloBody))
	if ra.Content[0].Text != rb.Content[0].Text || ra.Usage.Output != rb.Usage.Output {
		t.Errorf("same seed and body gave different replies: %q vs %q", ra.Content[0].Text, rb.Content[0].Text)
	}
	if ra.Content[0].Text == rc.Content[0].Text {
		t.Errorf("different seeds gave the same reply %q", ra.Content[0].Text)
	}
	pinned := decode(t, call(a, "POST", "/v1/messages", helloBody, "x-sim-output-tokens", "42"))
	if pinned.Usage.Output != 42 || len(strings.Fields(pinned.Content[0].Text)) != 42 {
		t.Errorf("x-sim-output-tokens 42 gave %d tokens, %d words", pinned.Usage.Output, len(strings.Fields(pinned.Content[0].Text)))
	}
}

func TestStopSequence(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	seen := false
	for i := range 16 {
		body := `{"model":"m","max_tokens":500,"stop_sequences":["STOP"],"messages":[{"role":"user","content":"q` + strings.Repeat("?", i) + `"}]}`
		w := call(s, "POST", "/v1/messages", body)
		if strings.Contains(w.Body.String(), `"stop_reason":"stop_sequence","stop_sequence":"STOP"`) {
			seen = true
		}
	}
	if !seen {
		t.Errorf("no request of 16 with stop_sequences stopped on one")
	}
}

// readEvents parses an SSE body into event names, checking the framing.
func readEvents(t *testing.T, body io.Reader) []string {
	t.Helper()
	var names []string
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		name, ok := strings.CutPrefix(line, "event: ")
		if !ok {
			t.Fatalf("line %q; want an event: line", line)
		}
		if !sc.Scan() || !strings.HasPrefix(sc.Text(), "data: {") {
			t.Fatalf("event %s without a data line", name)
		}
		if !sc.Scan() || sc.Text() != "" {
			t.Fatalf("event %s not followed by a blank line", name)
		}
		names = append(names, name)
	}
	return names
}

func TestStreamShape(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	w := call(s, "POST", "/v1/messages", `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "x-sim-output-tokens", "9")
	if ct := w.Header().Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
		t.Errorf("content-type %q", ct)
	}
	got := strings.Join(readEvents(t, w.Body), ",")
	want := "message_start,content_block_start,ping,content_block_delta,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop"
	if got != want {
		t.Errorf("events\n %s; want\n %s", got, want)
	}
}

func TestFaults(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	stream := `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

	w := call(s, "POST", "/v1/messages", helloBody, "x-sim-fault", "529", "x-sim-retry-after-ms", "250")
	wantError(t, w, 529, "overloaded_error", "retry")
	if w.Header().Get("retry-after-ms") != "250" {
		t.Errorf("retry-after-ms = %q; want 250", w.Header().Get("retry-after-ms"))
	}
	wantError(t, call(s, "POST", "/v1/messages", helloBody, "x-sim-fault", "429"), 429, "rate_limit_error", "rate limit")

	w = call(s, "POST", "/v1/messages", helloBody, "x-sim-fault", "bad-json")
	if w.Code != 200 || strings.HasSuffix(strings.TrimSpace(w.Body.String()), "}") {
		t.Errorf("bad-json: %d %q; want 200 with a cut-off body", w.Code, w.Body)
	}

	w = call(s, "POST", "/v1/messages", stream, "x-sim-fault", "midstream-error")
	raw := w.Body.String()
	names := readEvents(t, w.Body)
	if w.Code != 200 || names[len(names)-1] != "error" || !strings.Contains(raw, `"overloaded_error"`) {
		t.Errorf("midstream-error: %d %v; want 200 ending in an error event", w.Code, names)
	}

	// -once faults fire for the first request with their key only.
	for i, want := range []int{500, 200, 200} {
		if w := call(s, "POST", "/v1/messages", helloBody, "x-sim-fault", "500-once", "x-sim-fault-key", "k"); w.Code != want {
			t.Errorf("500-once attempt %d: %d; want %d", i, w.Code, want)
		}
	}
}

func TestFaultRates(t *testing.T) {
	s := New(Config{Seed: 5, FaultRate529: 0.5})
	defer s.Close()
	n := 0
	for range 200 {
		if call(s, "POST", "/v1/messages", helloBody).Code == 529 {
			n++
		}
	}
	if n < 70 || n > 130 {
		t.Errorf("%d of 200 requests got 529; want about half", n)
	}
}

func TestResetAndHangOverHTTP(t *testing.T) {
	_, ts, _ := startSim(t, Config{})
	post := func(ctx context.Context, body, fault string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/messages", strings.NewReader(body))
		req.Header.Set("x-api-key", "k")
		req.Header.Set("x-sim-fault", fault)
		return http.DefaultClient.Do(req)
	}
	for _, body := range []string{helloBody, `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`} {
		resp, err := post(context.Background(), body, "reset")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Errorf("reset fault: body read cleanly; want a broken connection")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if resp, err := post(ctx, helloBody, "hang"); err == nil {
		resp.Body.Close()
		t.Errorf("hang fault answered %d; want no answer", resp.StatusCode)
	}
}

func TestStatsAndReset(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	call(s, "POST", "/v1/messages", helloBody, "x-sim-output-tokens", "1000000")
	call(s, "POST", "/v1/messages", helloBody, "x-api-key", "")
	st := s.Stats()
	if st.Requests != 2 || st.ByStatus["200"] != 1 || st.ByStatus["401"] != 1 || st.PeakInflight != 1 {
		t.Errorf("stats %+v", st)
	}
	// 256 output tokens of sonnet at $15/MTok plus a few input tokens at $3.
	want := (float64(st.Tokens.Input)*3 + 256*15) / 1e6
	if st.Tokens.Output != 256 || st.CostUSD < want*0.999 || st.CostUSD > want*1.001 {
		t.Errorf("tokens %+v cost %v; want 256 output and cost %v", st.Tokens, st.CostUSD, want)
	}
	w := call(s, "POST", "/sim/reset", "")
	if w.Code != 200 || s.Stats().Requests != 0 || s.Stats().PeakInflight != 0 {
		t.Errorf("after reset: %d %+v", w.Code, s.Stats())
	}
	if !strings.Contains(call(s, "GET", "/sim/stats", "").Body.String(), `"by_status":{}`) {
		t.Errorf("GET /sim/stats after reset: %s", call(s, "GET", "/sim/stats", "").Body)
	}
}
