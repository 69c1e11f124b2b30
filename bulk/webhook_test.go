package bulk

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

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
