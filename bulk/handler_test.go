package bulk

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/internal/pgtest"
)

// PostgreSQL's TEXT takes neither a NUL nor bytes that are not UTF-8, and
// a submission's model (a JSON string may hold \u0000), Idempotency-Key
// and Sluice-Webhook-Url (a header value may hold bytes 0x80-0xff) went
// into TEXT columns as sent. The insert failed, and with it the group
// commit's whole transaction: the submission was answered 500 "retry
// it", and so was every other client's submission committed in the same
// group, so one client sending such submissions kept failing everyone
// else's. They are now refused with 400 before the store.
func TestUnstorableTextIsRefusedAndFailsNobodyElse(t *testing.T) {
	dsn := pgtest.Start(t)
	h := newHarness(t, Config{Store: dsn, WebhookSecret: "whsec-test"})
	poisons := []struct {
		name string
		body string
		hdr  []string
	}{
		{"NUL in the model", `{"model":"claude-sonnet-4-5\u0000","max_tokens":8,"messages":[]}`, nil},
		{"Idempotency-Key not UTF-8", msgBody("x"), []string{"Idempotency-Key", "k-\xff\xfe"}},
		{"webhook URL not UTF-8", msgBody("x"), []string{HeaderWebhookURL, "https://example.invalid/\xff"}},
	}
	for _, p := range poisons {
		if code, v := h.do("POST", "/v1/bulk/messages", p.body, p.hdr...); code != http.StatusBadRequest {
			t.Errorf("%s: %d %v; want 400", p.name, code, v)
		}
	}
	// Ids and cursors of such bytes found nothing, and the look-up's
	// failure was answered 500 "retry".
	for _, path := range []string{"/v1/bulk/messages/bulkmsg_%FF", "/v1/bulk/messages/bulkmsg_%FF/cancel"} {
		method := "GET"
		if strings.HasSuffix(path, "cancel") {
			method = "POST"
		}
		if code, v := h.do(method, path, ""); code != http.StatusNotFound {
			t.Errorf("%s %s: %d %v; want 404", method, path, code, v)
		}
	}
	if code, v := h.do("GET", "/v1/bulk/messages?after_id=%FF", ""); code != http.StatusBadRequest {
		t.Errorf("list after_id=%%FF: %d %v; want 400", code, v)
	}
	// Others' submissions, sent alongside poisoned ones so that some share
	// their group commits, are all stored.
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := range 40 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			p := poisons[i%len(poisons)]
			h.do("POST", "/v1/bulk/messages", p.body, p.hdr...)
		}()
		go func() {
			defer wg.Done()
			if code, _ := h.doWith("sk-ant-other-"+strings.Repeat("x", i%3), "POST", "/v1/bulk/messages", msgBody("fine")); code != http.StatusAccepted {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		t.Errorf("%d of 40 well-formed submissions of other keys failed alongside the poisoned ones; want none", failed)
	}
}
