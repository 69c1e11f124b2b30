package bulk

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

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
	// The polls are in once each has made its first read: it watches the
	// request before that read.
	for deadline := time.Now().Add(10 * time.Second); h.svc.pollReads.Load() < waiters; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d polls in after 10 s", h.svc.pollReads.Load(), waiters)
		}
	}
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
