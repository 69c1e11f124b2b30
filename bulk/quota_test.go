package bulk

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
)

// quotaBody is a submission of exactly n bytes (as stored: no
// surrounding space).
func quotaBody(t *testing.T, n int) string {
	t.Helper()
	b := msgBody("")
	pad := n - len(b)
	if pad < 0 {
		t.Fatalf("a body of %d bytes is shorter than an empty message", n)
	}
	return msgBody(strings.Repeat("x", pad))
}

// wantQuotaRefusal checks a refusal for the per-key quota: 429
// rate_limit_error with retry-after, naming the setting and what the key
// has stored.
func wantQuotaRefusal(t *testing.T, code int, hdr http.Header, v map[string]any, stored string) {
	t.Helper()
	e, _ := v["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if code != http.StatusTooManyRequests || e["type"] != "rate_limit_error" || hdr.Get("Retry-After") == "" ||
		!strings.Contains(msg, "BULK_MAX_PENDING_MB") || !strings.Contains(msg, stored) {
		t.Errorf("past the quota: %d %v (retry-after %q); want 429 rate_limit_error with retry-after naming BULK_MAX_PENDING_MB and %q stored",
			code, v, hdr.Get("Retry-After"), stored)
	}
}

// post submits body with key and returns the status, headers and JSON.
func (h *harness) post(key, body string) (int, http.Header, map[string]any) {
	h.t.Helper()
	req, _ := http.NewRequest("POST", h.url+"/v1/bulk/messages", strings.NewReader(body))
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		h.t.Fatalf("POST: %d, body not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header, v
}

// A key may hold MaxPendingBytes of submissions not yet ended; past it
// its submissions are refused with 429 until some end (here, a cancel),
// other keys are not affected, a body larger than the whole quota is 413,
// and the count survives a restart, since it is read from the store.
func TestPendingQuotaPerKey(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir, Secret: "s", MaxWait: time.Hour, MaxPendingBytes: 3500}
	h := newHarness(t, cfg)
	body := quotaBody(t, 1000)
	var ids []string
	for range 3 {
		ids = append(ids, h.submit(body))
	}
	code, hdr, v := h.post(testKey, body)
	wantQuotaRefusal(t, code, hdr, v, "3000 bytes")
	if code, v := h.doWith("sk-another-key", "POST", "/v1/bulk/messages", body); code != http.StatusAccepted {
		t.Errorf("another key's submission: %d %v; want 202 (the quota is per key)", code, v)
	}
	if code, v := h.do("POST", "/v1/bulk/messages", quotaBody(t, 4000)); code != http.StatusRequestEntityTooLarge || v["error"].(map[string]any)["type"] != "request_too_large" {
		t.Errorf("a body larger than the whole quota: %d %v; want 413 request_too_large", code, v)
	}
	if code, v := h.do("POST", "/v1/bulk/messages/"+ids[0]+"/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %v", code, v)
	}
	h.submit(body) // the canceled one ended: its bytes no longer count

	// A new service on the same store counts what is stored.
	h.svc.Close()
	h2 := newHarness(t, cfg)
	code, hdr, v = h2.post(testKey, body)
	wantQuotaRefusal(t, code, hdr, v, "3000 bytes")
}

// Two replicas sharing PostgreSQL: one key's submissions sent to both at
// once store no more than the quota between them.
func TestPendingQuotaAcrossReplicas(t *testing.T) {
	dsn := pgtest.Start(t)
	cfg := Config{Store: dsn, Secret: "s", MaxWait: time.Hour, MaxPendingBytes: 10 * 1000}
	a, b := newHarness(t, cfg), newHarness(t, cfg)
	body := quotaBody(t, 1000)
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for _, h := range []*harness{a, b} {
		for range 15 {
			wg.Go(func() {
				code, _, v := h.post(testKey, body)
				mu.Lock()
				defer mu.Unlock()
				codes[code]++
				if code != http.StatusAccepted && code != http.StatusTooManyRequests {
					t.Errorf("submission: %d %v; want 202 or 429", code, v)
				}
			})
		}
	}
	wg.Wait()
	if codes[http.StatusAccepted] != 10 || codes[http.StatusTooManyRequests] != 20 {
		t.Errorf("30 submissions of 1000 bytes against a 10,000-byte quota on two replicas: %v; want 10 × 202 and 20 × 429", codes)
	}
}
