package proxy

// The bulk endpoint behind the proxy: its bodies' timeout and budget, and
// each sluice key's submissions its own.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bulk"
)

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

func msgBody() string {
	return `{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"hello there"}]}`
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
