package bulk

// Attacks by a hostile client on the bulk endpoint, second round. Each
// test failed before its fix.

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
	dsn := startPostgres(t)
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

// Webhooks were delivered one at a time, each waiting up to the webhook
// client's timeout (10 s): one client whose submissions name a receiver
// that accepts connections and never answers held every other client's
// deliveries back by a timeout per delivery of its own, for every one of
// its 20 attempts (a thousand such submissions: days). A round's
// deliveries now go at once, so a slow receiver costs the others at most
// one timeout a round.
func TestSlowWebhookReceiverDoesNotHoldOthersDeliveries(t *testing.T) {
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var hmu sync.Mutex
	go func() {
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			hmu.Lock()
			held = append(held, c) // accepted, never answered
			hmu.Unlock()
		}
	}()
	t.Cleanup(func() {
		hole.Close()
		hmu.Lock()
		for _, c := range held {
			c.Close()
		}
		hmu.Unlock()
	})
	delivered := make(chan time.Time, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case delivered <- time.Now():
		default:
		}
	}))
	t.Cleanup(hook.Close)
	const timeout = 1500 * time.Millisecond
	h := newHarness(t, Config{MaxWait: time.Hour, WebhookSecret: "whsec", WebhookClient: &http.Client{Timeout: timeout}})
	const slow = 6
	for i := range slow {
		id := h.submit(msgBody(fmt.Sprint("slow ", i)), HeaderWebhookURL, "http://"+hole.Addr().String()+"/hook")
		h.do("POST", "/v1/bulk/messages/"+id+"/cancel", "") // ended at once: its webhook is due
	}
	code, v := h.doWith("sk-ant-another-client", "POST", "/v1/bulk/messages", msgBody("mine"), HeaderWebhookURL, hook.URL)
	if code != http.StatusAccepted {
		t.Fatalf("submit: %d %v", code, v)
	}
	ended := time.Now()
	h.doAs("sk-ant-another-client", "POST", "/v1/bulk/messages/"+v["id"].(string)+"/cancel")
	select {
	case at := <-delivered:
		if d := at.Sub(ended); d > 2*timeout+time.Second {
			t.Errorf("the other client's webhook came %v after its request ended; want within about one receiver timeout (%v), not one per slow delivery ahead of it", d.Round(time.Millisecond), timeout)
		}
	case <-time.After(8 * time.Second):
		t.Fatalf("the other client's webhook did not come within 8 s of its request's end, behind %d deliveries to a receiver that never answers (timeout %v each)", slow, timeout)
	}
}

// Every change to any request (a cancel, a batch's claim, its create, a
// chunk of results) woke every long poll, whoever's, and each woken poll
// read its request from the store again: one client holding a thousand
// GET ?wait=60s open made each of another client's cancels cost a
// thousand store reads (measured: 50 submissions and cancels took 3.8 s
// and 2.7 s of CPU with 1,000 polls waiting, 78 ms without). A poll is
// now woken only when its own request may have ended; it still looks
// once a second (another replica may have ended it).
func TestLongPollsAreNotWokenByOthersChanges(t *testing.T) {
	h := newHarness(t, Config{MaxWait: time.Hour})
	id := h.submit(msgBody("wait on me"))
	tr := &http.Transport{MaxIdleConnsPerHost: 200}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	const waiters, changes = 100, 40
	var wg sync.WaitGroup
	defer wg.Wait()
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", h.url+"/v1/bulk/messages/"+id+"?wait=20s", nil)
			req.Header.Set("x-api-key", testKey)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	defer h.do("POST", "/v1/bulk/messages/"+id+"/cancel", "") // the polls end
	time.Sleep(time.Second)                                   // the polls are in
	const other = "sk-ant-someone-else"
	before, start := h.svc.pollReads.Load(), time.Now()
	for i := range changes {
		code, v := h.doWith(other, "POST", "/v1/bulk/messages", msgBody(fmt.Sprint("c", i)))
		if code != http.StatusAccepted {
			t.Fatalf("submit: %d %v", code, v)
		}
		h.doAs(other, "POST", "/v1/bulk/messages/"+v["id"].(string)+"/cancel")
	}
	reads, took := h.svc.pollReads.Load()-before, time.Since(start)
	// Once a second each, and a few more for the ends of the seconds.
	if want := int64(waiters) * (int64(took/time.Second) + 2); reads > want {
		t.Errorf("%d polls of one key read the store %d times while another key made %d changes in %v; want at most %d (once a second each), not once a change each", waiters, reads, changes, took.Round(time.Millisecond), want)
	}
}

// Two replicas sharing PostgreSQL: a client that sends one submission,
// with one Idempotency-Key, to both at once made one replica's insert
// break the unique index on (key, Idempotency-Key), which failed that
// replica's whole group commit: its other clients' submissions were
// answered 500 (measured: 33 of 300 in 30 rounds), and so was the
// duplicate, instead of 202 with the request the other replica stored.
func TestIdempotencyKeyRaceAcrossReplicasFailsNobody(t *testing.T) {
	dsn := startPostgres(t)
	a := newHarness(t, Config{Store: dsn, Secret: "s", MaxWait: time.Hour})
	b := newHarness(t, Config{Store: dsn, Secret: "s", MaxWait: time.Hour})
	var mu sync.Mutex
	var failed []string
	ids := map[string]map[string]bool{} // Idempotency-Key → ids answered
	for round := range 12 {
		var wg sync.WaitGroup
		key := fmt.Sprint("k", round)
		ids[key] = map[string]bool{}
		for _, h := range []*harness{a, b} {
			wg.Go(func() {
				code, v := h.do("POST", "/v1/bulk/messages", msgBody("same"), "Idempotency-Key", key)
				mu.Lock()
				defer mu.Unlock()
				if code != http.StatusAccepted {
					failed = append(failed, fmt.Sprintf("the duplicate: %d %v", code, v))
					return
				}
				ids[key][v["id"].(string)] = true
			})
			for j := range 5 {
				wg.Go(func() {
					if code, v := h.doWith(fmt.Sprint("sk-other-", j), "POST", "/v1/bulk/messages", msgBody("other")); code != http.StatusAccepted {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("another client's: %d %v", code, v))
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
	}
	if len(failed) > 0 {
		t.Errorf("%d submissions failed while one Idempotency-Key raced across two replicas; want none. First: %s", len(failed), failed[0])
	}
	for key, got := range ids {
		if len(got) > 1 {
			t.Errorf("Idempotency-Key %s: two requests stored, %v; want one", key, got)
		}
	}
}

// A webhook receiver's redirect is not followed: the 307 is a failed
// delivery, retried to the same URL, and the address it points to never
// gets the result.
func TestWebhookRedirectIsNotFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	var attempts atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	}))
	defer hook.Close()
	h := newHarness(t, Config{MaxWait: time.Hour, WebhookSecret: "whsec"})
	id := h.submit(msgBody("redirected"), HeaderWebhookURL, hook.URL)
	if code, _ := h.do("POST", "/v1/bulk/messages/"+id+"/cancel", ""); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	for deadline := time.Now().Add(10 * time.Second); attempts.Load() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("webhook attempts: %d; want the redirected one and a retry", attempts.Load())
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target got %d deliveries; want none", n)
	}
}

// Long polls are bounded: with MaxLongPolls 2, a third poll that would
// wait is answered 529 with retry-after at once, a read without ?wait=
// still answers, and once the two waiting polls have ended a poll may
// wait again. Nothing else bounds the connections and goroutines that
// long polls hold.
func TestLongPollsAreBounded(t *testing.T) {
	h := newHarness(t, Config{MaxWait: time.Hour, MaxLongPolls: 2})
	id := h.submit(msgBody("polled"))
	poll := func() int {
		req, _ := http.NewRequest("GET", h.url+"/v1/bulk/messages/"+id+"?wait=20s", nil)
		req.Header.Set("x-api-key", testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Go(func() { codes[i] = poll() })
	}
	for deadline := time.Now().Add(10 * time.Second); h.svc.longPolls.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d long polls waiting; want 2", h.svc.longPolls.Load())
		}
	}
	req, _ := http.NewRequest("GET", h.url+"/v1/bulk/messages/"+id+"?wait=20s", nil)
	req.Header.Set("x-api-key", testKey)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 529 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), `"overloaded_error"`) {
		t.Errorf("a third long poll: %d retry-after %q %s; want 529, retry-after 1, overloaded_error", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refused poll took %v; want an answer at once", d)
	}
	if code, v := h.do("GET", "/v1/bulk/messages/"+id, ""); code != 200 || v["status"] != StatusQueued {
		t.Errorf("a read without wait: %d %v; want 200 queued", code, v)
	}
	if code, _ := h.do("POST", "/v1/bulk/messages/"+id+"/cancel", ""); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	wg.Wait()
	if codes[0] != 200 || codes[1] != 200 {
		t.Errorf("the two waiting polls: %v; want 200, 200 once the request ended", codes)
	}
	if n := h.svc.longPolls.Load(); n != 0 {
		t.Errorf("%d long polls counted after all ended; want 0", n)
	}
	if code, v := h.do("GET", "/v1/bulk/messages/"+id+"?wait=1s", ""); code != 200 || v["status"] != StatusEnded {
		t.Errorf("a long poll after the others ended: %d %v; want 200 ended", code, v)
	}
}
