package proxy

// Attacks by a hostile client or a failing upstream, second round (see
// hostile_test.go for the first). Each test failed before its fix.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/bulk"
	"github.com/sluicehq/sluice/config"
)

// resetAfter answers a stream's first events and then resets the
// connection (RST), as a crashed upstream or a middlebox does.
func resetAfter(t *testing.T, events int) *httptest.Server {
	t.Helper()
	return startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, ev := range sseEvents[:events] {
			w.Write([]byte(ev))
		}
		w.(http.Flusher).Flush()
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	})
}

// A stream the upstream broke off is ended with an in-band api_error
// event. Its message quoted the read error, which names the upstream's
// address ("read tcp 10.0.0.5:41234->10.0.0.9:443: read: connection
// reset by peer"): what mapError keeps out of every other answer, since
// it may name a private host, reached the client.
func TestBrokenStreamDoesNotTellTheUpstreamAddress(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		up := resetAfter(t, 3)
		_, px := startProxy(t, testConfig(t, up.URL, windowed))
		resp := post(t, px.URL, "/v1/messages", streamRequestJSON)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		var errEvent string
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "data:") && strings.Contains(line, `"type":"error"`) {
				errEvent = line
			}
		}
		if errEvent == "" {
			t.Fatal("no in-band error event after the upstream broke the stream")
		}
		host, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
		if strings.Contains(errEvent, port) || strings.Contains(errEvent, host) || strings.Contains(errEvent, "tcp") {
			t.Errorf("the in-band error names the upstream's address %s:%s: %s", host, port, errEvent)
		}
		if !strings.Contains(errEvent, `"api_error"`) {
			t.Errorf("in-band error %s; want an api_error", errEvent)
		}
	})
}

// bulkProxy serves a proxy with the bulk endpoint in front of an upstream
// that is never reached (the bulk window does not close within a test),
// with bodies that must arrive within bodyTimeout and the options opt.
func bulkProxy(t *testing.T, bodyTimeout time.Duration, opt ...Options) *testServer {
	t.Helper()
	up := startUpstream(t, apiHandler)
	u, _ := url.Parse(up.URL)
	svc, err := bulk.New(context.Background(), bulk.Config{Upstream: u, DataDir: t.TempDir(), MaxWait: time.Hour, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{}
	if len(opt) > 0 {
		o = opt[0]
	}
	o.Bulk, o.BodyReadTimeout = svc, bodyTimeout
	_, px := startProxyWith(t, testConfig(t, up.URL, true), o)
	t.Cleanup(svc.Close) // after the proxy has stopped (cleanups run last first)
	return px
}

// A bulk submission's body, like every other request body, must arrive
// within the body timeout (README, "Slow and idle connections": "on every
// path, or it is answered 408"). The bulk handler read it with no
// deadline at all: a client that declares a body and sends it a byte at
// a time kept its connection, its goroutine and its share of the bulk
// bodies' budget for as long as it liked, uncounted by MAX_PENDING_CONNS.
func TestSlowBulkBodyIsAnswered408(t *testing.T) {
	px := bulkProxy(t, 300*time.Millisecond)
	c, err := net.Dial("tcp", px.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := msgBody()
	fmt.Fprintf(c, "POST /v1/bulk/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: sk-test\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:10])
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within 3 s to a bulk body that stopped arriving (body timeout 300 ms): %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), `"type":"error"`) {
		t.Errorf("slow bulk body: %d %s; want 408 with an Anthropic-shaped error", resp.StatusCode, b)
	}
}

// A chunked bulk body held 32 MB of the bulk endpoint's 256 MB budget
// from its first byte to its last: eight clients that start a chunked
// upload and trickle it refused every other submission with 529. The
// body is now read (into a buffer of its size, under BODY_BUDGET_MB, in
// 64 KB steps) before the bulk handler takes its exact size.
func TestTricklingChunkedBulkBodiesDoNotShutOutOthers(t *testing.T) {
	px := bulkProxy(t, 5*time.Second)
	for range 8 {
		c, err := net.Dial("tcp", px.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /v1/bulk/messages HTTP/1.1\r\nHost: x\r\nX-Api-Key: sk-test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n")
	}
	time.Sleep(200 * time.Millisecond) // the eight reach the handler
	resp := post(t, px.URL, "/v1/bulk/messages", msgBody())
	if b := readAll(t, resp.Body); resp.StatusCode != http.StatusAccepted {
		t.Errorf("a submission while eight chunked uploads trickle: %d %s; want 202", resp.StatusCode, b)
	}
}

func msgBody() string {
	return `{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"hello there"}]}`
}

// docs/bulk.md: "Requests are visible only to the key that sent them
// (another key gets 404)". With inbound keys, sluice put its held
// upstream key on every request before the bulk endpoint saw it, so every
// sluice key was the same submitter there: bob could read alice's
// requests and their results, list them and cancel them.
func TestBulkRequestsOfOneSluiceKeyAreNotAnothers(t *testing.T) {
	keys := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, keys, keyEntry("alice", ""), keyEntry("bob", ""))
	in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
	if err != nil {
		t.Fatal(err)
	}
	px := bulkProxy(t, 5*time.Second, Options{Inbound: in})
	status, body := send(t, "POST", px.URL+"/v1/bulk/messages", msgBody(), "x-api-key", sluiceKey("alice"))
	if status != http.StatusAccepted {
		t.Fatalf("alice's submission: %d %s", status, body)
	}
	var accepted struct{ ID string }
	json.Unmarshal([]byte(body), &accepted)
	if status, body := send(t, "GET", px.URL+"/v1/bulk/messages/"+accepted.ID, "", "x-api-key", sluiceKey("bob")); status != http.StatusNotFound {
		t.Errorf("bob reads alice's bulk request: %d %.200s; want 404", status, body)
	}
	if status, body := send(t, "GET", px.URL+"/v1/bulk/messages", "", "x-api-key", sluiceKey("bob")); status != http.StatusOK || strings.Contains(body, accepted.ID) {
		t.Errorf("bob lists bulk requests: %d %.200s; want 200 without alice's", status, body)
	}
	if status, body := send(t, "POST", px.URL+"/v1/bulk/messages/"+accepted.ID+"/cancel", "", "x-api-key", sluiceKey("bob")); status != http.StatusNotFound {
		t.Errorf("bob cancels alice's bulk request: %d %.200s; want 404", status, body)
	}
	if status, body := send(t, "GET", px.URL+"/v1/bulk/messages/"+accepted.ID, "", "x-api-key", sluiceKey("alice")); status != http.StatusOK || !strings.Contains(body, `"status":"queued"`) {
		t.Errorf("alice reads her bulk request: %d %.200s; want 200, queued", status, body)
	}
}

// endsEarly answers a stream's first events and then ends the response
// cleanly (the chunked body's last chunk), with tail, if any, after them:
// an upstream or a gateway that closes a stream on a timeout of its own.
func endsEarly(t *testing.T, events int, tail string) *httptest.Server {
	t.Helper()
	return startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, ev := range sseEvents[:events] {
			w.Write([]byte(ev))
		}
		w.Write([]byte(tail))
	})
}

// A 200 stream that ends, cleanly at the HTTP level, before message_stop
// was relayed as if it were whole: the SDKs then return a partial Message
// (no stop_reason, part of the text) with no error, and the caller cannot
// tell. A trailing half event was written as is, so the client's parser
// read garbage. sluice now drops the half event and ends the stream with
// an in-band api_error, as when the upstream breaks off.
func TestStreamEndingBeforeMessageStopEndsWithAnError(t *testing.T) {
	for _, tc := range []struct{ name, tail string }{
		{"on an event boundary", ""},
		{"mid-event", "event: content_block_delta\ndata: {\"type\":\"content_bl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bothModes(t, func(t *testing.T, windowed bool) {
				up := endsEarly(t, 4, tc.tail)
				_, px := startProxy(t, testConfig(t, up.URL, windowed))
				resp := post(t, px.URL, "/v1/messages", streamRequestJSON)
				got := readAll(t, resp.Body)
				events := strings.Split(strings.TrimSuffix(got, "\n\n"), "\n\n")
				last := events[len(events)-1]
				if !strings.HasPrefix(last, "event: error\n") || !strings.Contains(last, `"api_error"`) {
					t.Errorf("the stream's last event: %q; want an in-band api_error", last)
				}
				if strings.Contains(got+"\n", `{"type":"content_bl`+"\n") {
					t.Errorf("the half event reached the client: %q", got)
				}
				if !strings.HasSuffix(got, "\n\n") {
					t.Errorf("the stream does not end on an event boundary: %q", got)
				}
			})
		})
	}
	// A whole stream is relayed as it came, with nothing added.
	up := endsEarly(t, len(sseEvents), "")
	_, px := startProxy(t, testConfig(t, up.URL, true))
	if got := readAll(t, post(t, px.URL, "/v1/messages", streamRequestJSON).Body); got != strings.Join(sseEvents, "") {
		t.Errorf("a whole stream came out as %q", got)
	}
}

// README: on every relayed path "a body silent for STREAM_IDLE_TIMEOUT_S
// is cut". A batch object (GET or POST /v1/messages/batches...), which
// sluice reads whole to point its results_url at itself, was read with
// no watch at all: an upstream that sent its headers and then stalled
// held the client's request for as long as the upstream's connection
// stayed open.
func TestStalledBatchObjectIsCut(t *testing.T) {
	release := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"data":[{"id":"msgbatch_1","results_url":"https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"`)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	_, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) { c.StreamIdleTimeout = 300 * time.Millisecond }))
	req, _ := http.NewRequest("GET", px.URL+"/v1/messages/batches", nil)
	req.Header.Set("X-Api-Key", "sk-test")
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/messages/batches from an upstream that stalls mid-body: %v; want an answer once STREAM_IDLE_TIMEOUT_S (300 ms) passes", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), `"api_error"`) {
		t.Errorf("stalled batch object: %d %s %v; want 502 api_error", resp.StatusCode, b, err)
	}
}

// Go's server answers an Expect header other than 100-continue by
// itself, before any handler, with 417 and an empty body: the one answer
// of Go's own that the shaping of its plain-text errors missed, since it
// is written as a handler's answer is (a Date, no body).
func TestExpectationFailedIsAnthropicShaped(t *testing.T) {
	up := startUpstream(t, apiHandler)
	_, px := startProxy(t, testConfig(t, up.URL, true))
	conn := rawRequest(t, px.Listener.Addr().String(), "POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nExpect: 200-ok\r\nContent-Length: 2", "{}")
	resp, body := readAnswer(t, conn, bufio.NewReader(conn))
	wantErrorAnswer(t, resp, body, http.StatusExpectationFailed, "invalid_request_error", "100-continue")
	// An upstream's own 417, relayed, is left as it came.
	up417 := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusExpectationFailed) })
	_, px2 := startProxy(t, testConfig(t, up417.URL, true))
	r2, err := http.Get(px2.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	if b := readAll(t, r2.Body); r2.StatusCode != http.StatusExpectationFailed || b != "" {
		t.Errorf("the upstream's 417: %d %q; want it relayed as it came", r2.StatusCode, b)
	}
}

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

// With inbound keys a sluice key's bulk requests are its own (see
// TestBulkRequestsOfOneSluiceKeyAreNotAnothers), stored with the held
// upstream key sealed under the sluice key's hash. When the operator
// rotates the held key (UPSTREAM_KEY_FILE, SIGHUP), the sluice key's next
// batches must go up with the new one, not the one stored first.
func TestBulkBatchesFollowARotatedHeldKey(t *testing.T) {
	var mu sync.Mutex
	var used []string
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == "POST" && r.URL.Path == "/v1/messages/batches" {
			mu.Lock()
			used = append(used, r.Header.Get("X-Api-Key"))
			n := len(used)
			mu.Unlock()
			fmt.Fprintf(w, `{"id":"msgbatch_%d","type":"message_batch","processing_status":"in_progress","request_counts":{"processing":1},"created_at":"2026-01-01T00:00:00Z"}`, n)
			return
		}
		io.WriteString(w, `{"id":"msgbatch_x","type":"message_batch","processing_status":"in_progress","request_counts":{"processing":1},"created_at":"2026-01-01T00:00:00Z"}`)
	})
	dir := t.TempDir()
	keys, keyFile := filepath.Join(dir, "keys.json"), filepath.Join(dir, "upstream-key")
	writeKeys(t, keys, keyEntry("alice", ""))
	if err := os.WriteFile(keyFile, []byte("sk-ant-held-one\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up.URL)
	svc, err := bulk.New(context.Background(), bulk.Config{Upstream: u, DataDir: t.TempDir(), MaxWait: 50 * time.Millisecond, PollInterval: time.Hour, Logger: quietLog})
	if err != nil {
		t.Fatal(err)
	}
	_, px := startProxyWith(t, testConfig(t, up.URL, true), Options{Bulk: svc, Inbound: in})
	t.Cleanup(svc.Close)
	batches := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			got := len(used)
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d batch creates upstream; want %d", got, n)
			}
		}
	}
	if status, body := send(t, "POST", px.URL+"/v1/bulk/messages", msgBody(), "x-api-key", sluiceKey("alice")); status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", status, body)
	}
	batches(1)
	if err := os.WriteFile(keyFile, []byte("sk-ant-held-two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := in.Reload(); err != nil {
		t.Fatal(err)
	}
	if status, body := send(t, "POST", px.URL+"/v1/bulk/messages", msgBody(), "x-api-key", sluiceKey("alice")); status != http.StatusAccepted {
		t.Fatalf("submit: %d %s", status, body)
	}
	batches(2)
	mu.Lock()
	defer mu.Unlock()
	if used[0] != "sk-ant-held-one" || used[1] != "sk-ant-held-two" {
		t.Errorf("the batches went up with %q; want the held key of the time of each: sk-ant-held-one, then sk-ant-held-two", used)
	}
}

// An upstream stream that sends nothing but pings is ended after
// STREAM_IDLE_TIMEOUT_S with an in-band timeout_error, and its slot comes
// back: pings are not the upstream's progress, and 8 such streams held a
// gate of 8 for ever.
func TestPingOnlyStreamDoesNotHoldItsSlotForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, sseEvents[0])
			w.(http.Flusher).Flush()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(10 * time.Second):
					io.WriteString(w, "event: ping\ndata: {\"type\": \"ping\"}\n\n")
					w.(http.Flusher).Flush()
				}
			}
		}
		rig := newBubbleRig(t, true, up, func(c *config.Config) { c.MaxConcurrency = 1 })
		req, _ := http.NewRequest("POST", rig.url+"/v1/messages", strings.NewReader(streamRequestJSON))
		req.Header.Set("X-Api-Key", "sk-test")
		resp, err := rig.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		read := make(chan []byte)
		go func() {
			b, _ := io.ReadAll(resp.Body)
			read <- b
		}()
		var body []byte
		select {
		case body = <-read:
		case <-time.After(2 * time.Hour):
			resp.Body.Close()
			<-read
			t.Fatal("after 2 h of pings and nothing else, the stream has not ended")
		}
		resp.Body.Close()
		synctest.Wait()
		if st := rig.proxy.GateStats(); st.InFlight != 0 {
			t.Errorf("after a stream of pings, it still holds %d of %d slots", st.InFlight, st.Capacity)
		}
		if !strings.Contains(string(body), "event: error") || !strings.Contains(string(body), `"timeout_error"`) ||
			!strings.Contains(string(body), "no event but pings") {
			t.Errorf("the stream ended without an in-band timeout_error:\n%s", body)
		}
	})
}

// Pings between an answer's events do not end it: only a stretch of
// STREAM_IDLE_TIMEOUT_S with nothing but pings does. Each delta here comes
// 50 s after the one before (the timeout is 60 s) with pings between.
func TestPingsBetweenSlowEventsKeepNothingFromEnding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for i, ev := range sseEvents {
				if strings.HasPrefix(ev, "event: ping") {
					continue // sseEvents' own ping: the test's pings are below
				}
				if i > 0 {
					for range 5 {
						time.Sleep(10 * time.Second)
						io.WriteString(w, "event: ping\ndata: {\"type\": \"ping\"}\n\n")
						w.(http.Flusher).Flush()
					}
				}
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
		}
		rig := newBubbleRig(t, true, up, func(c *config.Config) { c.StreamIdleTimeout = 60 * time.Second })
		req, _ := http.NewRequest("POST", rig.url+"/v1/messages", strings.NewReader(streamRequestJSON))
		req.Header.Set("X-Api-Key", "sk-test")
		resp, err := rig.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(body), "event: error") || !strings.Contains(string(body), "event: message_stop") {
			t.Errorf("a slow stream with pings between its events was cut:\n%s", body)
		}
	})
}
