package proxy

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/tracing"
)

// otlpReceiver is an OTLP/HTTP collector in the test: it decodes what the
// exporter really sends to POST /v1/traces.
type otlpReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	res []*tracepb.ResourceSpans
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rcv := &otlpReceiver{}
	rcv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP receiver: %s %s (%s); want POST /v1/traces, protobuf", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Errorf("OTLP receiver: decode: %v", err)
			http.Error(w, "bad protobuf", http.StatusBadRequest)
			return
		}
		rcv.mu.Lock()
		rcv.res = append(rcv.res, req.ResourceSpans...)
		rcv.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

// spans is every span received so far.
func (rcv *otlpReceiver) spans() []*tracepb.Span {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var out []*tracepb.Span
	for _, rs := range rcv.res {
		for _, ss := range rs.ScopeSpans {
			out = append(out, ss.Spans...)
		}
	}
	return out
}

// serviceName is the service.name of the first spans received.
func (rcv *otlpReceiver) serviceName() string {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, kv := range rcv.res[0].Resource.Attributes {
		if kv.Key == "service.name" {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// tracingProvider is the provider sluice serve builds with TRACING_ENABLED=1,
// exporting to rcv as OTEL_EXPORTER_OTLP_ENDPOINT says.
func tracingProvider(t *testing.T, rcv *otlpReceiver) *tracing.Provider {
	t.Helper()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.srv.URL)
	tp, err := tracing.New(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	if tp.TracerProvider == nil {
		t.Fatal("tracing enabled, but no tracer provider")
	}
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

// flushUntil flushes tp until rcv holds a server span, which ServeHTTP
// ends after the client may already have its answer.
func flushUntil(t *testing.T, tp *tracing.Provider, rcv *otlpReceiver) []*tracepb.Span {
	t.Helper()
	sdk := tp.TracerProvider.(*sdktrace.TracerProvider)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := sdk.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans := rcv.spans()
		for _, s := range spans {
			if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
				return spans
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no server span received; got %d spans", len(spans))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// upstreamRecorder answers as h does and keeps each call's traceparent.
type upstreamRecorder struct {
	mu      sync.Mutex
	parents []string
}

func (u *upstreamRecorder) handler(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.parents = append(u.parents, r.Header.Get("Traceparent"))
		u.mu.Unlock()
		h(w, r)
	}
}

func (u *upstreamRecorder) traceparents() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.parents...)
}

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
)

// postTraced posts a Messages request carrying the client's traceparent.
func postTraced(t *testing.T, base, traceparent string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(requestJSON))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Api-Key", "sk-test-secret")
	req.Header.Set("Authorization", "Bearer tok-secret")
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func attrs(s *tracepb.Span) map[string]*commonpb.AnyValue {
	m := map[string]*commonpb.AnyValue{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// byName groups spans by name.
func byName(spans []*tracepb.Span) map[string][]*tracepb.Span {
	m := map[string][]*tracepb.Span{}
	for _, s := range spans {
		m[s.Name] = append(m[s.Name], s)
	}
	return m
}

// noSecrets fails if any span attribute carries the request's key, token
// or body.
func noSecrets(t *testing.T, spans []*tracepb.Span) {
	t.Helper()
	for _, s := range spans {
		for _, kv := range s.Attributes {
			v := kv.Value.String()
			for _, secret := range []string{"sk-test-secret", "tok-secret", `"content":"hi"`, "max_tokens"} {
				if strings.Contains(v, secret) {
					t.Errorf("span %q attribute %s carries %q", s.Name, kv.Key, secret)
				}
			}
		}
	}
}

// A windowed request, traced: its server span continues the client's
// trace, and beneath it are the window wait, the slot wait and the
// upstream attempt, whose traceparent the upstream receives.
func TestTracingWindowedRequest(t *testing.T) {
	for _, tc := range []struct {
		name     string
		parkWhen int
	}{{"parked", -1}, {"in place", 1000}} {
		t.Run(tc.name, func(t *testing.T) { testTracingWindowed(t, tc.parkWhen) })
	}
}

func testTracingWindowed(t *testing.T, parkWhen int) {
	rcv := startOTLPReceiver(t)
	tp := tracingProvider(t, rcv)
	var up upstreamRecorder
	upstream := startUpstream(t, up.handler(apiHandler))
	_, srv := startProxyWith(t, testConfig(t, upstream.URL, true), Options{TracerProvider: tp.TracerProvider, ParkWhenQueued: parkWhen})

	resp := postTraced(t, srv.URL, "00-"+clientTraceID+"-"+clientSpanID+"-01")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	spans := flushUntil(t, tp, rcv)
	names := byName(spans)
	if len(names["POST /v1/messages"]) != 1 || len(names["window wait"]) != 1 || len(names["slot wait"]) != 1 || len(names["upstream POST"]) != 1 {
		t.Fatalf("spans %v; want one each of the server span, window wait, slot wait and upstream POST", names)
	}
	server := names["POST /v1/messages"][0]
	if server.Kind != tracepb.Span_SPAN_KIND_SERVER || hexID(server.TraceId) != clientTraceID || hexID(server.ParentSpanId) != clientSpanID {
		t.Errorf("server span kind %v trace %s parent %s; want server, the client's trace %s and span %s",
			server.Kind, hexID(server.TraceId), hexID(server.ParentSpanId), clientTraceID, clientSpanID)
	}
	a := attrs(server)
	if a["http.request.method"].GetStringValue() != "POST" || a["sluice.route"].GetStringValue() != "messages" ||
		a["http.response.status_code"].GetIntValue() != 200 || a["sluice.mode"].GetStringValue() != "windowed" ||
		a["gen_ai.request.model"].GetStringValue() != "claude-sonnet-4-5" || a["sluice.stream"] == nil || a["sluice.stream"].GetBoolValue() ||
		a["sluice.wave_id"].GetIntValue() == 0 {
		t.Errorf("server span attributes %v", server.Attributes)
	}
	for _, name := range []string{"window wait", "slot wait", "upstream POST"} {
		s := names[name][0]
		if hexID(s.TraceId) != clientTraceID || hexID(s.ParentSpanId) != hexID(server.SpanId) {
			t.Errorf("%s: trace %s parent %s; want trace %s, parent the server span %s", name, hexID(s.TraceId), hexID(s.ParentSpanId), clientTraceID, hexID(server.SpanId))
		}
		if s.StartTimeUnixNano < server.StartTimeUnixNano || s.EndTimeUnixNano > server.EndTimeUnixNano || s.EndTimeUnixNano < s.StartTimeUnixNano {
			t.Errorf("%s: [%d, %d] not within the server span's [%d, %d]", name, s.StartTimeUnixNano, s.EndTimeUnixNano, server.StartTimeUnixNano, server.EndTimeUnixNano)
		}
	}
	if w, s := names["window wait"][0], names["slot wait"][0]; w.EndTimeUnixNano != s.StartTimeUnixNano {
		t.Errorf("the slot wait starts at %d, not where the window wait ends (%d)", s.StartTimeUnixNano, w.EndTimeUnixNano)
	}
	attempt := names["upstream POST"][0]
	aa := attrs(attempt)
	if attempt.Kind != tracepb.Span_SPAN_KIND_CLIENT || aa["http.response.status_code"].GetIntValue() != 200 || aa["sluice.attempt"].GetIntValue() != 1 {
		t.Errorf("attempt span kind %v attributes %v", attempt.Kind, attempt.Attributes)
	}
	want := "00-" + clientTraceID + "-" + hexID(attempt.SpanId) + "-01"
	if got := up.traceparents(); len(got) != 1 || got[0] != want {
		t.Errorf("the upstream saw traceparent %q; want %q (the attempt's span)", got, want)
	}
	if service := rcv.serviceName(); service != "sluice" {
		t.Errorf("service.name %q; want sluice by default", service)
	}
	noSecrets(t, spans)
}

// A retried attempt is two attempt spans, a retry wait between them, and
// two traceparents upstream, each naming its own attempt.
func TestTracingRetriedAttempt(t *testing.T) {
	t.Setenv("OTEL_SERVICE_NAME", "sluice-eu")
	rcv := startOTLPReceiver(t)
	tp := tracingProvider(t, rcv)
	var up upstreamRecorder
	var calls atomic.Int32
	upstream := startUpstream(t, up.handler(failing(1, 529, map[string]string{"Retry-After-Ms": "10"}, &calls)))
	_, srv := startProxyWith(t, testConfig(t, upstream.URL, true), Options{TracerProvider: tp.TracerProvider})

	if resp := postTraced(t, srv.URL, ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	names := byName(flushUntil(t, tp, rcv))
	attempts := names["upstream POST"]
	if len(attempts) != 2 || len(names["retry wait"]) != 1 {
		t.Fatalf("%d attempt spans, %d retry waits; want 2 and 1", len(attempts), len(names["retry wait"]))
	}
	server := names["POST /v1/messages"][0]
	if len(server.ParentSpanId) != 0 {
		t.Errorf("server span has parent %s; the client sent no traceparent", hexID(server.ParentSpanId))
	}
	if attempts[0].StartTimeUnixNano > attempts[1].StartTimeUnixNano {
		attempts[0], attempts[1] = attempts[1], attempts[0]
	}
	for i, s := range attempts {
		a := attrs(s)
		wantStatus := []int64{529, 200}[i]
		if a["sluice.attempt"].GetIntValue() != int64(i+1) || a["http.request.resend_count"].GetIntValue() != int64(i) ||
			a["http.response.status_code"].GetIntValue() != wantStatus || hexID(s.ParentSpanId) != hexID(server.SpanId) {
			t.Errorf("attempt %d: attributes %v parent %s", i+1, s.Attributes, hexID(s.ParentSpanId))
		}
	}
	if attrs(attempts[0])["sluice.retry_cause"].GetStringValue() == "" {
		t.Errorf("the retried attempt names no retry cause: %v", attempts[0].Attributes)
	}
	got := up.traceparents()
	if len(got) != 2 {
		t.Fatalf("upstream saw %d calls", len(got))
	}
	for i, s := range attempts {
		if want := "00-" + hexID(server.TraceId) + "-" + hexID(s.SpanId) + "-01"; got[i] != want {
			t.Errorf("call %d carried traceparent %q; want %q", i+1, got[i], want)
		}
	}
	if service := rcv.serviceName(); service != "sluice-eu" {
		t.Errorf("service.name %q; want OTEL_SERVICE_NAME's sluice-eu", service)
	}
	if attrs(server)["sluice.retries"].GetIntValue() != 1 {
		t.Errorf("server span attributes %v; want sluice.retries 1", server.Attributes)
	}
}

// Off by default: no tracer provider is built, and sluice adds no
// traceparent; a client's own passes through untouched, as any
// end-to-end header does.
func TestTracingOffByDefault(t *testing.T) {
	// TRACING_ENABLED=0, the default (cmd/sluice's tests check that).
	tp, err := tracing.New(context.Background(), false)
	if err != nil || tp.TracerProvider != nil {
		t.Fatalf("tracing.New off: provider %v, err %v; want none", tp.TracerProvider, err)
	}
	var up upstreamRecorder
	upstream := startUpstream(t, up.handler(apiHandler))
	bothModes(t, func(t *testing.T, windowed bool) {
		p, srv := startProxyWith(t, testConfig(t, upstream.URL, windowed), Options{TracerProvider: tp.TracerProvider})
		if p.tracer != nil {
			t.Fatal("a tracer with tracing off")
		}
		up.mu.Lock()
		up.parents = nil
		up.mu.Unlock()
		postTraced(t, srv.URL, "")
		client := "00-" + clientTraceID + "-" + clientSpanID + "-01"
		postTraced(t, srv.URL, client)
		if got := up.traceparents(); len(got) != 2 || got[0] != "" || got[1] != client {
			t.Errorf("upstream saw traceparents %q; want none, then the client's own", got)
		}
	})
}

// OTEL_SDK_DISABLED turns tracing off even when TRACING_ENABLED is on.
func TestTracingSDKDisabled(t *testing.T) {
	t.Setenv("OTEL_SDK_DISABLED", "true")
	tp, err := tracing.New(context.Background(), true)
	if err != nil || tp.TracerProvider != nil {
		t.Fatalf("provider %v, err %v; want none", tp.TracerProvider, err)
	}
}

// On the plain path and a relayed path there is no wait: a server span
// and its one upstream call.
func TestTracingPlainAndRelay(t *testing.T) {
	rcv := startOTLPReceiver(t)
	tp := tracingProvider(t, rcv)
	var up upstreamRecorder
	upstream := startUpstream(t, up.handler(apiHandler))
	_, srv := startProxyWith(t, testConfig(t, upstream.URL, false), Options{TracerProvider: tp.TracerProvider})
	postTraced(t, srv.URL, "00-"+clientTraceID+"-"+clientSpanID+"-01")
	names := byName(flushUntil(t, tp, rcv))
	server, attempts := names["POST /v1/messages"], names["upstream POST"]
	if len(server) != 1 || len(attempts) != 1 || len(names["window wait"])+len(names["slot wait"]) != 0 {
		t.Fatalf("spans %v; want a server span and one attempt, no waits", names)
	}
	if m := attrs(server[0])["sluice.mode"].GetStringValue(); m != "plain" {
		t.Errorf("mode %q", m)
	}
	if hexID(attempts[0].ParentSpanId) != hexID(server[0].SpanId) {
		t.Error("the attempt is not the server span's child")
	}

	resp, err := http.Get(srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var relayed *tracepb.Span
	for deadline := time.Now().Add(5 * time.Second); relayed == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		tp.TracerProvider.(*sdktrace.TracerProvider).ForceFlush(context.Background())
		if s := byName(rcv.spans())["GET relay"]; len(s) == 1 {
			relayed = s[0]
		}
	}
	if relayed == nil {
		t.Fatal("no span for the relayed GET /v1/models")
	}
	got := up.traceparents()
	if len(got) != 2 || !strings.HasPrefix(got[1], "00-"+hexID(relayed.TraceId)+"-") {
		t.Errorf("the relayed call carried %q; want the relay span's trace %s", got, hexID(relayed.TraceId))
	}
	// Probes and scrapes are not traced.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	tp.TracerProvider.(*sdktrace.TracerProvider).ForceFlush(context.Background())
	for name := range byName(rcv.spans()) {
		if strings.Contains(name, "healthz") || strings.Contains(name, "readyz") || strings.Contains(name, "metrics") {
			t.Errorf("a probe was traced: %q", name)
		}
	}
}
