package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
)

// upstreamTap records the bytes of every upstream response body, per
// x-sim-fault-key, in attempt order, so a test can compare what the client
// got with what the upstream sent.
type upstreamTap struct {
	mu       sync.Mutex
	attempts map[string][][]byte
}

func (tp *upstreamTap) wrap(h http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tw := &teeWriter{ResponseWriter: w}
		h.ServeHTTP(tw, r)
		tp.mu.Lock()
		defer tp.mu.Unlock()
		key := r.Header.Get("X-Sim-Fault-Key")
		tp.attempts[key] = append(tp.attempts[key], tw.buf.Bytes())
	}
}

func (tp *upstreamTap) get(key string) [][]byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.attempts[key]
}

// teeWriter copies what a handler writes; Unwrap keeps Flush and Hijack
// (the simulator's connection reset) working through it.
type teeWriter struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// body says where the client's body must come from.
type bodyFrom int

const (
	relayed  bodyFrom = iota // exactly the upstream's last answer
	appended                 // the upstream's last answer, then one in-band error event of sluice's
	own                      // sluice's own JSON error
	// truncated: the whole events of the upstream's answer, without the
	// event it was cut at, then one in-band error event of sluice's
	truncated
	// ownOrRelayed: sluice's own JSON error, or the upstream's last
	// answer
	ownOrRelayed
)

// lastEventError is the error type of the last SSE event in a stream body,
// or "" when the last event is not an error event.
func lastEventError(body []byte) string {
	events := strings.Split(strings.TrimRight(string(body), "\n"), "\n\n")
	last := events[len(events)-1]
	if !strings.HasPrefix(last, "event: error\n") {
		return ""
	}
	_, data, _ := strings.Cut(last, "data: ")
	var e apierror.Body
	if json.Unmarshal([]byte(data), &e) != nil {
		return "(undecodable)"
	}
	return e.Error.Type
}

// TestFaultMatrix sends each of the simulator's faults through sluice and
// checks what the client sees, how many upstream attempts it took, and that
// every slot, queue place and upstream call is released afterwards. Each
// case sends three requests at once through two slots (unless it says
// otherwise), in virtual time.
func TestFaultMatrix(t *testing.T) {
	timeout := func(d time.Duration) func(*config.Config) {
		return func(c *config.Config) { c.Timeout = d; c.MaxConcurrency = 3 }
	}
	idle := func(d time.Duration) func(*config.Config) {
		return func(c *config.Config) { c.StreamIdleTimeout = d; c.MaxConcurrency = 3 }
	}
	for _, tc := range []struct {
		name         string
		windowed     bool
		stream       bool
		fault        string // x-sim-fault
		retryAfterMs string // x-sim-retry-after-ms
		edit         func(*config.Config)

		clientTimeout time.Duration // the client gives up after this; 0: never
		wantStatus    int           // 0: the client gets no answer (it gave up)
		wantError     string        // error.type of a JSON error, or of a stream's last event
		wantRetry     string        // retry-after header
		wantRetryMs   string        // retry-after-ms header
		wantBody      bodyFrom
		wantAttempts  int // upstream calls per request
		// wantAttemptsAtLeast, when set instead, is the fewest upstream
		// calls per request: a request answered for the upstream's rate
		// limit may never have reached it.
		wantAttemptsAtLeast int
		clients             int           // requests at once; 0: 3
		wantMinTook         time.Duration // no answer before this
		wantTook            time.Duration // exact, when nonzero
	}{
		{name: "429-once honours retry-after-ms", windowed: true, fault: "429-once", retryAfterMs: "700",
			wantStatus: 200, wantAttempts: 2, wantMinTook: 700 * time.Millisecond},
		{name: "429 throughout: the upstream's 429 and retry-after after RETRY_MAX_ATTEMPTS", windowed: true, fault: "429",
			wantStatus: 429, wantError: "rate_limit_error", wantRetry: "1", wantAttempts: 3, wantMinTook: 2 * time.Second},
		{name: "429 plain: passed through at once", fault: "429",
			wantStatus: 429, wantError: "rate_limit_error", wantRetry: "1", wantAttempts: 1},
		{name: "529-once retried in place", windowed: true, fault: "529-once",
			wantStatus: 200, wantAttempts: 2, wantMinTook: 500 * time.Millisecond}, // the first backoff, jitter fixed at 0
		{name: "529 burst: the upstream's 529 and retry-after-ms after RETRY_MAX_ATTEMPTS", windowed: true, fault: "529", retryAfterMs: "300",
			wantStatus: 529, wantError: "overloaded_error", wantRetryMs: "300", wantAttempts: 3, wantMinTook: 600 * time.Millisecond},
		{name: "529 plain: passed through at once", fault: "529-once",
			wantStatus: 529, wantError: "overloaded_error", wantAttempts: 1},
		{name: "500-once retried in place", windowed: true, fault: "500-once",
			wantStatus: 200, wantAttempts: 2},
		{name: "500 throughout: the upstream's 500", windowed: true, fault: "500",
			wantStatus: 500, wantError: "api_error", wantAttempts: 3},
		// A 200 cut mid-body was generated (and billed) upstream: never
		// sent again, on either path (issue 37).
		{name: "reset mid-body once: 502 at once, not generated twice", windowed: true, fault: "reset-once",
			wantStatus: 502, wantError: "api_error", wantBody: own, wantAttempts: 1},
		{name: "reset mid-body throughout: 502 at once", windowed: true, fault: "reset",
			wantStatus: 502, wantError: "api_error", wantBody: own, wantAttempts: 1},
		{name: "reset mid-body plain: 502 at once", fault: "reset",
			wantStatus: 502, wantError: "api_error", wantBody: own, wantAttempts: 1},
		{name: "reset mid-stream: events so far, then in-band api_error", windowed: true, stream: true, fault: "reset",
			wantStatus: 200, wantError: "api_error", wantBody: appended, wantAttempts: 1},
		{name: "hang: 504 at the wave deadline", windowed: true, fault: "hang", edit: timeout(2 * time.Second),
			wantStatus: 504, wantError: "timeout_error", wantBody: own, wantAttempts: 1, wantTook: 2*time.Second + time.Millisecond},
		{name: "hang streaming: 504 at the wave deadline", windowed: true, stream: true, fault: "hang", edit: timeout(2 * time.Second),
			wantStatus: 504, wantError: "timeout_error", wantBody: own, wantAttempts: 1, wantTook: 2*time.Second + time.Millisecond},
		{name: "hang plain: no deadline; the client's own timeout cancels the call", fault: "hang", clientTimeout: 5 * time.Second,
			wantStatus: 0, wantAttempts: 1, wantTook: 5 * time.Second},
		{name: "slow stream beyond the idle timeout: in-band timeout_error", windowed: true, stream: true, fault: "slow-stream", edit: idle(time.Second),
			wantStatus: 200, wantError: "timeout_error", wantBody: appended, wantAttempts: 1, wantTook: time.Second + time.Millisecond},
		{name: "slow stream beyond the idle timeout, plain: in-band timeout_error", stream: true, fault: "slow-stream", edit: idle(time.Second),
			wantStatus: 200, wantError: "timeout_error", wantBody: appended, wantAttempts: 1, wantTook: time.Second},
		// Events 2 s apart, but the ping between content_block_start and
		// the first delta is not progress: 4 s between them, within 5.
		{name: "slow stream within the idle timeout: completes", windowed: true, stream: true, fault: "slow-stream", edit: idle(5 * time.Second),
			wantStatus: 200, wantAttempts: 1, wantMinTook: 8 * time.Second},
		{name: "midstream error: relayed as the upstream sent it", windowed: true, stream: true, fault: "midstream-error",
			wantStatus: 200, wantError: "overloaded_error", wantAttempts: 1},
		{name: "huge event: the stream ends with an in-band api_error, not a 12 MB buffer", windowed: true, stream: true, fault: "huge-event",
			wantStatus: 200, wantError: "api_error", wantBody: truncated, wantAttempts: 1},
		{name: "huge event plain: in-band api_error", stream: true, fault: "huge-event",
			wantStatus: 200, wantError: "api_error", wantBody: truncated, wantAttempts: 1},
		{name: "429 throughout past the deadline: the upstream's 429, never a 504", windowed: true, fault: "429", clients: 12,
			edit:       func(c *config.Config) { c.Timeout = 3 * time.Second; c.RetryMaxAttempts = 10; c.MaxConcurrency = 2 },
			wantStatus: 429, wantError: "rate_limit_error", wantRetry: "1", wantBody: ownOrRelayed, wantAttemptsAtLeast: 1},
		// A 200 whose body is not JSON is no answer: the SDKs would fail
		// to decode it and not retry; a 502 they retry.
		{name: "bad JSON: 502 api_error, not the upstream's 200", windowed: true, fault: "bad-json",
			wantStatus: 502, wantError: "api_error", wantBody: own, wantAttempts: 1},
		{name: "bad JSON plain: 502 api_error, not the upstream's 200", fault: "bad-json",
			wantStatus: 502, wantError: "api_error", wantBody: own, wantAttempts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := sim.New(sim.Config{SlowStreamInterval: 2 * time.Second})
				t.Cleanup(s.Close)
				tap := &upstreamTap{attempts: map[string][][]byte{}}
				rig := newBubbleRig(t, tc.windowed, tap.wrap(s), func(c *config.Config) {
					c.MaxConcurrency = 2
					if tc.edit != nil {
						tc.edit(c)
					}
				})
				rig.proxy.rand = func() float64 { return 0 }
				rig.proxy.log = slog.New(slog.DiscardHandler)

				type answer struct {
					resp *http.Response
					body []byte
					err  error
					took time.Duration
				}
				clients := tc.clients
				if clients == 0 {
					clients = 3
				}
				answers := make([]answer, clients)
				var wg sync.WaitGroup
				for i := range answers {
					wg.Go(func() {
						ctx := context.Background()
						if tc.clientTimeout > 0 {
							var cancel context.CancelFunc
							ctx, cancel = context.WithTimeout(ctx, tc.clientTimeout)
							defer cancel()
						}
						body := requestJSON
						if tc.stream {
							body = streamRequestJSON
						}
						req, err := http.NewRequestWithContext(ctx, http.MethodPost, rig.url+"/v1/messages", strings.NewReader(body))
						if err != nil {
							t.Error(err)
							return
						}
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("X-Api-Key", "sk-test")
						req.Header.Set("Anthropic-Version", "2023-06-01")
						req.Header.Set("X-Sim-Output-Tokens", "8")
						req.Header.Set("X-Sim-Fault", tc.fault)
						req.Header.Set("X-Sim-Fault-Key", fmt.Sprint("k", i))
						if tc.retryAfterMs != "" {
							req.Header.Set("X-Sim-Retry-After-Ms", tc.retryAfterMs)
						}
						start := time.Now()
						resp, err := rig.client.Do(req)
						a := answer{resp: resp, err: err}
						if err == nil {
							a.body, a.err = io.ReadAll(resp.Body)
							resp.Body.Close()
						}
						a.took = time.Since(start)
						answers[i] = a
					})
				}
				wg.Wait()
				synctest.Wait() // every upstream handler has returned

				for i, a := range answers {
					key := fmt.Sprint("k", i)
					ups := tap.get(key)
					if tc.wantAttemptsAtLeast == 0 && len(ups) != tc.wantAttempts {
						t.Errorf("request %d: %d upstream attempts; want %d", i, len(ups), tc.wantAttempts)
					}
					if tc.wantTook != 0 && a.took != tc.wantTook {
						t.Errorf("request %d: answered after %v; want %v", i, a.took, tc.wantTook)
					}
					if a.took < tc.wantMinTook {
						t.Errorf("request %d: answered after %v; want no sooner than %v", i, a.took, tc.wantMinTook)
					}
					if tc.wantStatus == 0 {
						if a.err == nil {
							t.Errorf("request %d: got status %d; want the client to have given up", i, a.resp.StatusCode)
						}
						continue
					}
					if a.err != nil {
						t.Errorf("request %d: no answer: %v", i, a.err)
						continue
					}
					if a.resp.StatusCode != tc.wantStatus {
						t.Errorf("request %d: status %d; want %d (body %.200q)", i, a.resp.StatusCode, tc.wantStatus, a.body)
						continue
					}
					if got := a.resp.Header.Get("Retry-After"); got != tc.wantRetry {
						t.Errorf("request %d: retry-after %q; want %q", i, got, tc.wantRetry)
					}
					if got := a.resp.Header.Get("Retry-After-Ms"); got != tc.wantRetryMs {
						t.Errorf("request %d: retry-after-ms %q; want %q", i, got, tc.wantRetryMs)
					}
					var gotError string
					switch {
					case isEventStream(a.resp.Header):
						gotError = lastEventError(a.body)
					case a.resp.StatusCode != 200:
						gotError = decodeError(t, bytes.NewReader(a.body)).Error.Type
					}
					if gotError != tc.wantError {
						t.Errorf("request %d: error type %q; want %q (body %.300q)", i, gotError, tc.wantError, a.body)
					}
					var last []byte
					if len(ups) > 0 {
						last = ups[len(ups)-1]
					}
					switch tc.wantBody {
					case relayed:
						if !bytes.Equal(a.body, last) {
							t.Errorf("request %d: body\n%q\nwant the upstream's last answer byte for byte\n%q", i, a.body, last)
						}
					case appended:
						rest, ok := bytes.CutPrefix(a.body, last)
						if !ok || len(last) == 0 || bytes.Count(rest, []byte("\n\n")) != 1 || !bytes.HasPrefix(rest, []byte("event: error\n")) {
							t.Errorf("request %d: body\n%q\nwant the upstream's bytes\n%q\nthen one error event", i, a.body, last)
						}
					case truncated:
						i := bytes.LastIndex(a.body, []byte("event: error\n"))
						if i < 0 || !bytes.HasPrefix(last, a.body[:i]) || !bytes.HasSuffix(a.body[:i], []byte("\n\n")) || len(a.body) > 1<<20 {
							t.Errorf("request %d: body of %d bytes\n%.300q\nwant whole events of the upstream's answer, then one error event", i, len(a.body), a.body)
						}
					case ownOrRelayed:
						// A request whose deadline passed before any answer came
						// back (in line, or with its first call in flight) gets
						// sluice's own 429.
						if id := a.resp.Header.Get("Request-Id"); !strings.HasPrefix(id, "req_sluice_") && !bytes.Equal(a.body, last) {
							t.Errorf("request %d: body\n%q\nwant sluice's own error or the upstream's last answer byte for byte\n%q", i, a.body, last)
						}
					case own:
						if id := a.resp.Header.Get("Request-Id"); !strings.HasPrefix(id, "req_sluice_") {
							t.Errorf("request %d: request-id %q; want sluice's own", i, id)
						}
					}
					if tc.wantStatus == 200 && tc.wantError == "" {
						// A success: a whole message, as JSON or as a complete stream.
						if tc.stream && !bytes.HasSuffix(a.body, []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")) {
							t.Errorf("request %d: stream did not end with message_stop: %q", i, a.body)
						}
						if !tc.stream && !json.Valid(a.body) {
							t.Errorf("request %d: body is not JSON: %q", i, a.body)
						}
					}
					if tc.fault == "bad-json" && len(ups) > 0 && json.Valid(ups[len(ups)-1]) {
						t.Errorf("request %d: the simulator's bad JSON left it valid: %q", i, ups[len(ups)-1])
					}
				}

				synctest.Wait()
				if st := rig.proxy.GateStats(); st.InFlight != 0 || st.Waiting != 0 {
					t.Errorf("gate after every answer = %+v; want no slot held, nobody waiting", st)
				}
				if q := rig.proxy.Queued(); q != 0 {
					t.Errorf("queued after every answer = %d; want 0", q)
				}
				if n := s.Stats().Inflight; n != 0 {
					t.Errorf("simulator still has %d calls in generation; want every upstream call ended", n)
				}
			})
		})
	}
}
