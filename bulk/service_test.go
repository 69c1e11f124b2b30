package bulk

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sim"
)

const testKey = "sk-ant-test-secret-key-0123456789"

func msgBody(text string) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":` + fmt.Sprintf("%q", text) + `}]}`
}

// harness is a Service in front of a simulator, both on loopback.
type harness struct {
	t   *testing.T
	sim *sim.Server
	svc *Service
	url string
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	s := sim.New(sim.Config{BatchDuration: 100 * time.Millisecond})
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	u, _ := url.Parse(up.URL)
	cfg.Upstream = u
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 200 * time.Millisecond
	}
	svc, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(svc)
	t.Cleanup(func() { front.Close(); svc.Close() })
	return &harness{t: t, sim: s, svc: svc, url: front.URL}
}

func (h *harness) do(method, path, body string, hdr ...string) (int, map[string]any) {
	h.t.Helper()
	return h.doWith(testKey, method, path, body, hdr...)
}

// doAs is a bodiless call with another key.
func (h *harness) doAs(key, method, path string) (int, map[string]any) {
	h.t.Helper()
	return h.doWith(key, method, path, "")
}

func (h *harness) doWith(key, method, path, body string, hdr ...string) (int, map[string]any) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
	req.Header.Set("x-api-key", key)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		h.t.Fatalf("%s %s: %d %q is not JSON", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, v
}

func (h *harness) submit(body string, hdr ...string) string {
	h.t.Helper()
	code, v := h.do("POST", "/v1/bulk/messages", body, hdr...)
	if code != 202 || v["status"] != StatusQueued {
		h.t.Fatalf("submit: %d %v; want 202 queued", code, v)
	}
	return v["id"].(string)
}

func (h *harness) await(id string) map[string]any {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		code, v := h.do("GET", "/v1/bulk/messages/"+id+"?wait=5s", "")
		if code != 200 {
			h.t.Fatalf("get %s: %d %v", id, code, v)
		}
		if v["status"] == StatusEnded {
			return v
		}
	}
	h.t.Fatalf("%s did not end in 20 s", id)
	return nil
}

func resultType(v map[string]any) string {
	r, _ := v["result"].(map[string]any)
	s, _ := r["type"].(string)
	return s
}

func TestSubmitToResults(t *testing.T) {
	h := newHarness(t, Config{MaxRequests: 3})
	var ids []string
	for i := range 5 { // a batch of 3 on count, one of 2 on age
		ids = append(ids, h.submit(msgBody(fmt.Sprint("hello ", i))))
	}
	bad := h.submit(msgBody("sim-fault:item-error"))
	for _, id := range ids {
		v := h.await(id)
		if resultType(v) != "succeeded" || v["batch_id"] == nil {
			t.Errorf("%s: %v; want a succeeded result and its batch", id, v)
		}
		msg := v["result"].(map[string]any)["message"].(map[string]any)
		if msg["type"] != "message" || msg["content"] == nil {
			t.Errorf("%s: result message %v", id, msg)
		}
	}
	if v := h.await(bad); resultType(v) != "errored" {
		t.Errorf("an item that errors upstream: %v; want an errored result", v)
	}
	// Read again: results stay.
	if _, v := h.do("GET", "/v1/bulk/messages/"+ids[0], ""); resultType(v) != "succeeded" {
		t.Errorf("second read: %v", v)
	}
	for _, id := range append(ids, bad) {
		if n := h.sim.CustomIDCounts()[id]; n != 1 {
			t.Errorf("%s reached the upstream %d times; want 1", id, n)
		}
	}
	// Another key sees none of them.
	req, _ := http.NewRequest("GET", h.url+"/v1/bulk/messages/"+ids[0], nil)
	req.Header.Set("x-api-key", "sk-other")
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("another key reading a request: %d; want 404", resp.StatusCode)
	}
	// The list, newest first, paginated, filtered.
	code, page := h.do("GET", "/v1/bulk/messages?limit=4&status=ended", "")
	data, _ := page["data"].([]any)
	if code != 200 || len(data) != 4 || page["has_more"] != true || data[0].(map[string]any)["id"] != bad {
		t.Fatalf("list: %d %v", code, page)
	}
	_, page2 := h.do("GET", "/v1/bulk/messages?limit=4&after_id="+page["last_id"].(string), "")
	if d2, _ := page2["data"].([]any); len(d2) != 2 || page2["has_more"] != false {
		t.Errorf("second page: %v; want the 2 oldest", page2)
	}
	// The key is dropped once nothing pending needs it, and was never
	// stored in the clear.
	deadline := time.Now().Add(5 * time.Second)
	for {
		sealed, err := h.svc.store.credential(context.Background(), credential{"x-api-key", testKey}.hash())
		if err != nil {
			t.Fatal(err)
		}
		if sealed == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the stored key was not deleted once its requests ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, f := range []string{"bulk.db", "bulk.db-wal"} {
		b, _ := os.ReadFile(filepath.Join(h.svc.cfg.DataDir, f))
		if bytes.Contains(b, []byte(testKey)) {
			t.Errorf("%s holds the API key in the clear", f)
		}
	}
	if st, _ := os.Stat(filepath.Join(h.svc.cfg.DataDir, secretFile)); st == nil || st.Mode().Perm() != 0o600 {
		t.Errorf("generated key file: %v; want mode 0600", st)
	}
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, Config{MaxWait: time.Hour})
	first := h.submit(msgBody("one"), "Idempotency-Key", "k1")
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		typ, says                string
	}{
		{"not JSON", "POST", "/v1/bulk/messages", "hello", nil, 400, "invalid_request_error", "JSON object"},
		{"a JSON array", "POST", "/v1/bulk/messages", "[1]", nil, 400, "invalid_request_error", "JSON object"},
		{"stream true", "POST", "/v1/bulk/messages", `{"model":"m","max_tokens":1,"messages":[],"stream":true}`, nil, 400, "invalid_request_error", "stream"},
		{"over 32 MB", "POST", "/v1/bulk/messages", `{"x":"` + strings.Repeat("a", 32<<20) + `"}`, nil, 413, "request_too_large", "32 MB"},
		{"unknown id", "GET", "/v1/bulk/messages/bulkmsg_nope", "", nil, 404, "not_found_error", "not found"},
		{"cancel unknown id", "POST", "/v1/bulk/messages/bulkmsg_nope/cancel", "", nil, 404, "not_found_error", "not found"},
		{"reused Idempotency-Key", "POST", "/v1/bulk/messages", msgBody("two"), []string{"Idempotency-Key", "k1"}, 409, "invalid_request_error", "different body"},
		{"bad wait", "GET", "/v1/bulk/messages/" + first + "?wait=soon", "", nil, 400, "invalid_request_error", "wait"},
		{"bad status filter", "GET", "/v1/bulk/messages?status=done", "", nil, 400, "invalid_request_error", "status"},
		{"webhook without secret", "POST", "/v1/bulk/messages", msgBody("w"), []string{HeaderWebhookURL, "http://127.0.0.1:1/hook"}, 400, "invalid_request_error", "BULK_WEBHOOK_SECRET"},
		{"wrong method", "DELETE", "/v1/bulk/messages/" + first, "", nil, 405, "invalid_request_error", "GET"},
	} {
		code, v := h.do(tc.method, tc.path, tc.body, tc.hdr...)
		e, _ := v["error"].(map[string]any)
		if code != tc.status || v["type"] != "error" || e["type"] != tc.typ || !strings.Contains(fmt.Sprint(e["message"]), tc.says) {
			t.Errorf("%s: %d %v; want %d %s saying %q", tc.name, code, v, tc.status, tc.typ, tc.says)
		}
	}
	// The same key with the same body is the same request.
	code, v := h.do("POST", "/v1/bulk/messages", msgBody("one"), "Idempotency-Key", "k1")
	if code != 202 || v["id"] != first {
		t.Errorf("same Idempotency-Key and body: %d %v; want 202 with id %s", code, v, first)
	}
	// No credentials.
	req, _ := http.NewRequest("POST", h.url+"/v1/bulk/messages", strings.NewReader(msgBody("x")))
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("no key: %d; want 401", resp.StatusCode)
	}
}

func TestCancelQueuedAndWebhook(t *testing.T) {
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	fails := 1
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got, bodies = append(got, r), append(bodies, b)
		if fails > 0 { // the first attempt fails: the delivery is retried
			fails--
			w.WriteHeader(500)
		}
	}))
	defer hook.Close()
	h := newHarness(t, Config{MaxWait: time.Hour, WebhookSecret: "whsec"})
	id := h.submit(msgBody("cancel me"), HeaderWebhookURL, hook.URL)
	code, v := h.do("POST", "/v1/bulk/messages/"+id+"/cancel", "")
	if code != 200 || v["status"] != StatusEnded || resultType(v) != "canceled" {
		t.Fatalf("cancel a queued request: %d %v; want ended, canceled", code, v)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook attempts: %d; want a failed one and a retry", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, r := range got[:2] {
		hid, ts := r.Header.Get(HeaderWebhookID), r.Header.Get(HeaderWebhookTimestamp)
		if hid != "whk_"+id || r.Header.Get(HeaderWebhookSignature) != Sign("whsec", hid, ts, bodies[i]) {
			t.Errorf("delivery %d: id %q signature %q; want whk_%s, signed", i, hid, r.Header.Get(HeaderWebhookSignature), id)
		}
		if !bytes.Contains(bodies[i], []byte(`"type":"canceled"`)) {
			t.Errorf("delivery %d body %s; want the canceled result", i, bodies[i])
		}
	}
	if h.sim.CustomIDCounts()[id] != 0 {
		t.Error("a request canceled while queued reached the upstream")
	}
}

func TestLostCreateAnswerIsReconciled(t *testing.T) {
	h := newHarness(t, Config{MaxRequests: 2})
	h.sim.SetBatchFaults(sim.BatchFaults{LoseCreateAnswers: 1})
	a, b := h.submit(msgBody("a")), h.submit(msgBody("b"))
	for _, id := range []string{a, b} {
		if v := h.await(id); resultType(v) != "succeeded" {
			t.Errorf("%s: %v", id, v)
		}
		if n := h.sim.CustomIDCounts()[id]; n != 1 {
			t.Errorf("%s reached the upstream %d times after a lost create answer; want 1", id, n)
		}
	}
}

// A key with a default webhook (BULK_KEY_WEBHOOKS) gets it for a
// submission that names none, signed like any other; a submission's own
// Sluice-Webhook-Url wins; another key's requests get no webhook.
func TestKeyWebhook(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]string{} // path -> webhook ids
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		id, ts := r.Header.Get(HeaderWebhookID), r.Header.Get(HeaderWebhookTimestamp)
		if r.Header.Get(HeaderWebhookSignature) != Sign("whsec", id, ts, b) {
			t.Errorf("delivery %s to %s is not signed with the webhook secret", id, r.URL.Path)
		}
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], id)
		mu.Unlock()
	}))
	defer hook.Close()
	keyHash := credential{"x-api-key", testKey}.hash()
	h := newHarness(t, Config{WebhookSecret: "whsec", KeyWebhooks: map[string]string{keyHash: hook.URL + "/key"}})
	byDefault := h.submit(msgBody("default"))
	own := h.submit(msgBody("own"), HeaderWebhookURL, hook.URL+"/own")
	req, _ := http.NewRequest("POST", h.url+"/v1/bulk/messages", strings.NewReader(msgBody("other key")))
	req.Header.Set("x-api-key", "sk-ant-another-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var other struct{ ID string }
	json.NewDecoder(resp.Body).Decode(&other)
	resp.Body.Close()
	if resp.StatusCode != 202 || other.ID == "" {
		t.Fatalf("the other key's submission: %d", resp.StatusCode)
	}
	h.await(byDefault)
	h.await(own)
	for {
		code, v := h.doAs("sk-ant-another-key", "GET", "/v1/bulk/messages/"+other.ID+"?wait=5s")
		if code != 200 {
			t.Fatalf("the other key's request: %d %v", code, v)
		}
		if v["status"] == StatusEnded {
			break
		}
	}
	// A request's webhook is queued in the transaction that ends it: with
	// all three ended, every delivery there will be is in the table. Wait
	// until none is pending; then every attempt has been made.
	deliveries := func() map[string]string { // id -> status
		rows, err := h.svc.store.r.QueryContext(context.Background(), `SELECT id, status FROM webhooks`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var id, status string
			if err := rows.Scan(&id, &status); err != nil {
				t.Fatal(err)
			}
			out[id] = status
		}
		return out
	}
	var queued map[string]string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		queued = deliveries()
		pending := false
		for _, status := range queued {
			pending = pending || status == "pending"
		}
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries %v still pending after 10 s", queued)
		}
	}
	if want := map[string]string{"whk_" + byDefault: "delivered", "whk_" + own: "delivered"}; !maps.Equal(queued, want) {
		t.Errorf("webhooks in the store %v; want %v, none for the other key", queued, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || len(got["/key"]) != 1 || got["/key"][0] != "whk_"+byDefault || len(got["/own"]) != 1 || got["/own"][0] != "whk_"+own {
		t.Errorf("deliveries %v; want whk_%s to /key and whk_%s to /own, none for the other key", got, byDefault, own)
	}
}

// A key's default webhook needs a secret to sign it with.
func TestKeyWebhooksNeedASecret(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1")
	_, err := New(context.Background(), Config{DataDir: t.TempDir(), Upstream: u, KeyWebhooks: map[string]string{"0123456789abcdef0123456789abcdef": "http://127.0.0.1:2/"}})
	if err == nil || !strings.Contains(err.Error(), "BULK_WEBHOOK_SECRET") {
		t.Fatalf("New without a webhook secret: %v; want it refused, naming BULK_WEBHOOK_SECRET", err)
	}
}
