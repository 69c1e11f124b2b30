package bench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestBackoff(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	noJitter := retryPolicy{max: 2, jitter: func() float64 { return 0 }}
	fullJitter := retryPolicy{max: 2, jitter: func() float64 { return 0.999999 }}
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		name string
		p    retryPolicy
		n    int
		h    http.Header
		want time.Duration
	}{
		{"first retry", noJitter, 0, nil, 500 * time.Millisecond},
		{"second retry", noJitter, 1, nil, time.Second},
		{"capped at 8s", noJitter, 6, nil, 8 * time.Second},
		{"jitter takes up to 25%", fullJitter, 0, nil, 375 * time.Millisecond},
		{"retry-after-ms wins", noJitter, 0, hdr("retry-after-ms", "1234", "retry-after", "9"), 1234 * time.Millisecond},
		{"retry-after seconds", noJitter, 0, hdr("retry-after", "3"), 3 * time.Second},
		{"retry-after date", noJitter, 0, hdr("retry-after", now.Add(4*time.Second).Format(http.TimeFormat)), 4 * time.Second},
		{"retry-after over 60s ignored", noJitter, 1, hdr("retry-after", "600"), time.Second},
		{"bad retry-after ignored", noJitter, 0, hdr("retry-after", "soon"), 500 * time.Millisecond},
	} {
		got := tc.p.backoff(tc.n, tc.h, now)
		if d := got - tc.want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("%s: backoff = %s; want %s", tc.name, got, tc.want)
		}
	}
	p := retryPolicy{}
	for _, tc := range []struct {
		status int
		should string
		want   bool
	}{
		{429, "", true}, {529, "", true}, {500, "", true}, {408, "", true}, {409, "", true},
		{400, "", false}, {404, "", false}, {400, "true", true}, {529, "false", false},
	} {
		h := http.Header{}
		if tc.should != "" {
			h.Set("x-should-retry", tc.should)
		}
		if got := p.shouldRetry(h, tc.status); got != tc.want {
			t.Errorf("shouldRetry(%d, x-should-retry=%q) = %v; want %v", tc.status, tc.should, got, tc.want)
		}
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func reply(status int, h http.Header, body string) *http.Response {
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

const overloaded = `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`

// TestRetriesInVirtualTime: two 529s then a reply take the SDK's backoff
// (retry-after-ms when sent, else 0.5s·2^n) and nothing else.
func TestRetriesInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		rt := roundTrip(func(r *http.Request) (*http.Response, error) {
			switch calls.Add(1) {
			case 1:
				return reply(529, http.Header{"Retry-After-Ms": {"250"}}, overloaded), nil
			case 2:
				return reply(529, nil, overloaded), nil
			}
			return reply(200, nil, `{"type":"message","content":[]}`), nil
		})
		c := &client{http: &http.Client{Transport: rt}, base: "http://up", model: "m", timeout: time.Minute,
			policy: retryPolicy{max: 2, jitter: func() float64 { return 0 }}}
		start := time.Now()
		o := c.do(context.Background(), 1, Arrival{PromptTokens: 1, OutputTokens: 1})
		if !o.OK || o.Retries != 2 || calls.Load() != 3 {
			t.Fatalf("outcome %+v after %d calls; want success on the third", o, calls.Load())
		}
		if took := time.Since(start); took != 250*time.Millisecond+time.Second {
			t.Fatalf("took %s of virtual time; want 250ms + 1s of backoff", took)
		}
	})
}

// TestOutcomes: each way an attempt can end is classified as the SDKs would
// see it, and anything not Anthropic-shaped is lost.
func TestOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			stream   bool
			resp     func(*http.Request) (*http.Response, error)
			ok, lost bool
			errType  string
			calls    int32
		}{
			{"400 not retried", false, func(*http.Request) (*http.Response, error) {
				return reply(400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"x"}}`), nil
			}, false, false, "invalid_request_error", 1},
			{"529 three times", false, func(*http.Request) (*http.Response, error) { return reply(529, nil, overloaded), nil },
				false, false, "overloaded_error", 3},
			{"html 502 is lost", false, func(*http.Request) (*http.Response, error) { return reply(502, nil, "<html>"), nil },
				false, true, "non_anthropic_502", 3},
			{"client timeout", false, func(r *http.Request) (*http.Response, error) {
				<-r.Context().Done()
				return nil, r.Context().Err()
			}, false, false, "client_timeout", 3},
			{"stream ok", true, func(*http.Request) (*http.Response, error) {
				return reply(200, nil, "event: content_block_delta\ndata: {}\n\nevent: message_stop\ndata: {}\n\n"), nil
			}, true, false, "", 1},
			{"stream in-band error", true, func(*http.Request) (*http.Response, error) {
				return reply(200, nil, "event: error\ndata: "+overloaded+"\n\n"), nil
			}, false, false, "stream_overloaded_error", 1},
			{"stream cut short is lost", true, func(*http.Request) (*http.Response, error) {
				return reply(200, nil, "event: content_block_delta\ndata: {}\n\n"), nil
			}, false, true, "stream_truncated", 1},
		} {
			var calls atomic.Int32
			rt := roundTrip(func(r *http.Request) (*http.Response, error) { calls.Add(1); return tc.resp(r) })
			c := &client{http: &http.Client{Transport: rt}, base: "http://up", model: "m", timeout: 5 * time.Second,
				policy: retryPolicy{max: 2, jitter: func() float64 { return 0 }}}
			o := c.do(context.Background(), 1, Arrival{Stream: tc.stream, PromptTokens: 1, OutputTokens: 1})
			if o.OK != tc.ok || o.Lost != tc.lost || o.ErrorType != tc.errType || calls.Load() != tc.calls {
				t.Errorf("%s: outcome %+v after %d calls; want ok=%v lost=%v type %q after %d",
					tc.name, o, calls.Load(), tc.ok, tc.lost, tc.errType, tc.calls)
			}
		}
	})
}

// A session's later turn repeats its earlier turns as they were sent, so
// that the API's lookback (and the simulator's) reads the prefix the turn
// before wrote. Before, each earlier user message was redrawn at the
// later turn's length: the history differed and the later turns read
// only the shared system prompt.
func TestSessionTurnsRepeatTheirHistory(t *testing.T) {
	sc, err := LoadScenario("agent-fleet")
	if err != nil {
		t.Fatal(err)
	}
	as, err := sc.Arrivals()
	if err != nil {
		t.Fatal(err)
	}
	turns := map[int]map[int]Arrival{}
	for _, a := range as {
		if turns[a.Session] == nil {
			turns[a.Session] = map[int]Arrival{}
		}
		turns[a.Session][a.Turn] = a
	}
	type body struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	text := func(c any) string { // a string content, or a text block's text
		if s, ok := c.(string); ok {
			return s
		}
		return c.([]any)[0].(map[string]any)["text"].(string)
	}
	for s := range 4 {
		var prev body
		for tn := range 3 {
			var b body
			if err := json.Unmarshal(requestBody("claude-sonnet-4-5", "", nil, 0, turns[s][tn]), &b); err != nil {
				t.Fatal(err)
			}
			for i, m := range prev.Messages {
				if text(m.Content) != text(b.Messages[i].Content) {
					t.Fatalf("session %d turn %d: message %d differs from the one turn %d sent", s, tn, i, tn-1)
				}
			}
			prev = b
		}
	}
}
