package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/dispatch"
)

// wantError checks that resp is an Anthropic-shaped error of status and type
// whose message mentions hint.
func wantError(t *testing.T, resp *http.Response, status int, errType, hint string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status = %d; want %d", resp.StatusCode, status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type = %q; want application/json", ct)
	}
	var e apierror.Body
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("error body is not JSON: %v", err)
	}
	if e.Type != "error" || e.Error.Type != errType {
		t.Errorf("error = %+v; want type error / %s", e, errType)
	}
	if !strings.Contains(e.Error.Message, hint) {
		t.Errorf("message %q does not mention %q", e.Error.Message, hint)
	}
	if e.RequestID == "" || resp.Header.Get("Request-Id") != e.RequestID {
		t.Errorf("request_id %q, request-id header %q; want both, equal", e.RequestID, resp.Header.Get("Request-Id"))
	}
}

func TestOwnErrorsAreAnthropicShaped(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		var calls atomic.Int32
		up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1); writeMessage(w) })
		_, px := startProxy(t, testConfig(t, up.URL, windowed))

		for _, tc := range []struct{ name, body, hint string }{
			{"empty", "", "empty"},
			{"array", `[{"model":"m"}]`, "not a JSON object"},
			{"not json", `model=claude`, "not a JSON object"},
			{"truncated", `{"model":"claude",`, "not valid JSON"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wantError(t, post(t, px.URL, "/v1/messages", tc.body), 400, "invalid_request_error", tc.hint)
			})
		}
		t.Run("too large", func(t *testing.T) {
			big := append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), maxMessagesBody)...)
			resp, err := http.Post(px.URL+"/v1/messages", "application/json", bytes.NewReader(big))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			wantError(t, resp, 413, "request_too_large", "32 MB")
		})
		t.Run("too large, chunked", func(t *testing.T) {
			big := append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), maxMessagesBody)...)
			// io.MultiReader hides the length: the body arrives chunked and
			// the limit must be enforced while reading.
			resp, err := http.Post(px.URL+"/v1/messages", "application/json", struct{ *bytes.Reader }{bytes.NewReader(big)})
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			wantError(t, resp, 413, "request_too_large", "32 MB")
		})
		t.Run("wrong method", func(t *testing.T) {
			resp, err := http.Get(px.URL + "/v1/messages")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			wantError(t, resp, 405, "invalid_request_error", "POST")
			if resp.Header.Get("Allow") != "POST" {
				t.Errorf("Allow = %q", resp.Header.Get("Allow"))
			}
		})
		if n := calls.Load(); n != 0 {
			t.Errorf("upstream was called %d times for requests sluice rejects", n)
		}
	})
}

// An unreachable upstream is a 502 that tells the client what to do, and
// never names the upstream's address or the dial error: those may be a
// private host, and belong in the operator's log.
func TestUnreachableUpstreamIs502WithoutItsAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	bothModes(t, func(t *testing.T, windowed bool) {
		_, px := startProxy(t, testConfig(t, addr, windowed))
		for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
			resp := post(t, px.URL, path, requestJSON)
			body := readAll(t, resp.Body)
			resp.Body = io.NopCloser(strings.NewReader(body))
			wantError(t, resp, 502, "api_error", "UPSTREAM_URL")
			if host := strings.TrimPrefix(addr, "http://"); strings.Contains(body, host) || strings.Contains(body, "refused") {
				t.Errorf("%s: the answer names the upstream or the dial error: %s", path, body)
			}
		}
	})
}

func TestHealthzDoesNotTouchUpstream(t *testing.T) {
	var calls atomic.Int32
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1) })
	_, px := startProxy(t, testConfig(t, up.URL, true))
	resp, err := http.Get(px.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || calls.Load() != 0 {
		t.Fatalf("healthz status %d, upstream calls %d; want 200 and 0", resp.StatusCode, calls.Load())
	}
}

func TestPanicInOneMemberLeavesOthersIntact(t *testing.T) {
	// A response writer that panics is the closest a test gets to a bug in
	// the relay; the proxy must contain it to that one request.
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Boom") != "" {
			panic(http.ErrAbortHandler) // the upstream drops this one
		}
		writeMessage(w)
	})
	_, px := startProxy(t, testConfig(t, up.URL, true))
	results := make(chan int, 6)
	for i := range 6 {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, px.URL+"/v1/messages", strings.NewReader(requestJSON))
			if i == 2 {
				req.Header.Set("X-Boom", "1")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- -1
				return
			}
			resp.Body.Close()
			results <- resp.StatusCode
		}()
	}
	var ok, bad int
	for range 6 {
		switch <-results {
		case 200:
			ok++
		case 502:
			bad++
		}
	}
	if ok != 5 || bad != 1 {
		t.Fatalf("%d ok, %d 502; want 5 and 1", ok, bad)
	}
}

// panickyTenants is a tenant policy whose AddTokens panics: a bug in
// what an answer's usage feeds, once the answer is on its way.
type panickyTenants struct{ dispatch.Tenants }

func (panickyTenants) AddTokens(string, int64) { panic("boom in AddTokens") }

// A panic in forward after a stream's status was sent (here in what the
// stream's usage feeds) cannot change the client's answer, but it is a
// bug the operator must hear of: the scheduler contains it as a
// *dispatch.PanicError, and answer, which waits for the stream, dropped
// it unlogged.
func TestPanicAfterStreamBeganIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) { writeStream(w) })
		log := rig.logs()
		rig.proxy.tenants = panickyTenants{rig.proxy.tenants}
		rig.answered(t, streamRequestJSON)
		if !strings.Contains(log.String(), "boom in AddTokens") {
			t.Errorf("the panic is not in the log:\n%s", log.String())
		}
	})
}

// A panic in conclude (here in what a whole answer's usage feeds, after the
// answer was written) is recovered on both ways in, as letGo recovers a
// parked request's: the client keeps the answer it was given, the panic
// is in sluice's log and the request has its one access line. Waiting in
// place, net/http's recovery closed the connection with the answer still
// in its buffer (the client read EOF), and neither the log nor the access
// line heard of it.
func TestPanicInSettleIsContainedOnBothWaysIn(t *testing.T) {
	for _, parked := range []bool{true, false} {
		t.Run(map[bool]string{true: "parked", false: "in-place"}[parked], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) { writeMessage(w) })
				log := rig.logs()
				rig.proxy.tenants = panickyTenants{rig.proxy.tenants}
				if !parked {
					rig.proxy.parkWhen = 1 << 20
				}
				if status, body := rig.answered(t, requestJSON); status != http.StatusOK || !strings.Contains(body, "Hello") {
					t.Errorf("status %d body %q; want the answer written before the panic", status, body)
				}
				logs := log.String()
				if !strings.Contains(logs, "boom in AddTokens") || strings.Count(logs, "msg=request ") != 1 {
					t.Errorf("want the panic logged and one access line:\n%s", logs)
				}
				if held := rig.proxy.bodies.Held(); held != 0 {
					t.Errorf("%d bytes of BODY_BUDGET_MB still held; want the body given back", held)
				}
			})
		})
	}
}

// panickyTracer panics when it starts an upstream attempt's span: a bug
// in forward, before any answer.
type panickyTracer struct{ trace.Tracer }

func (p panickyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if strings.HasPrefix(name, "upstream ") {
		panic("boom in the attempt's span")
	}
	return p.Tracer.Start(ctx, name, opts...)
}

// A panic in forward is answered 500 api_error on both paths, logged, and
// accounted: the windowed path's scheduler contains it as a
// *dispatch.PanicError; the plain path called forward bare, so net/http's
// recovery closed the connection (the client read EOF) and neither
// sluice's log nor the access line heard of it.
func TestPanicInForwardIsAnsweredOnBothPaths(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		synctest.Test(t, func(t *testing.T) {
			rig := newBubbleRig(t, windowed, func(w http.ResponseWriter, r *http.Request) { writeMessage(w) })
			log := rig.logs()
			rig.proxy.tracer = panickyTracer{noop.NewTracerProvider().Tracer("test")}
			resp, err := rig.post(t, context.Background(), requestJSON)
			if err != nil {
				t.Fatal(err)
			}
			wantError(t, resp, http.StatusInternalServerError, "api_error", "internal error")
			resp.Body.Close()
			synctest.Wait()
			logs := log.String()
			if !strings.Contains(logs, "boom in the attempt") || strings.Count(logs, "msg=request ") != 1 {
				t.Errorf("want the panic logged and one access line:\n%s", logs)
			}
			if held := rig.proxy.bodies.Held(); held != 0 {
				t.Errorf("%d bytes of BODY_BUDGET_MB still held; want the body given back", held)
			}
		})
	})
}
