package proxy

// The budget of request bodies held by waiting requests (BODY_BUDGET_MB).

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// Bodies held by waiting requests have a budget: past it a request is
// answered 429 with retry-after before its body is read, and the budget
// comes back when the request ends.
func TestBodyBudgetSheds429BeforeTheBodyIsRead(t *testing.T) {
	up, holding, release := heldUpstream(t)
	t.Cleanup(release)
	p, px := startProxyWith(t, testConfig(t, up, true, func(c *config.Config) { c.BodyBudget = 1 << 20 }), Options{})
	big := `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"` + strings.Repeat("x", 700<<10) + `"}]}`
	first := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Post(px.URL+"/v1/messages", "application/json", strings.NewReader(big))
		if err != nil {
			t.Error(err)
			close(first)
			return
		}
		first <- resp
	}()
	waitFor(t, holding, "the first request to reach the upstream")
	if held := p.bodies.Held(); held != int64(len(big)) {
		t.Errorf("budget holds %d bytes with one request waiting; want its %d", held, len(big))
	}
	// The second is refused on its headers: it sends them and no body.
	head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d", len(big))
	conn := rawRequest(t, px.Listener.Addr().String(), head, "")
	resp, body := readAnswer(t, conn, bufio.NewReader(conn))
	wantErrorAnswer(t, resp, body, 429, "rate_limit_error", "BODY_BUDGET_MB")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("429 past the budget carries no retry-after")
	}
	release()
	if resp := <-first; resp == nil || resp.StatusCode != 200 {
		t.Fatalf("the waiting request was not served: %v", resp)
	} else {
		resp.Body.Close()
	}
	eventually(t, "the budget to come back after every request ended", func() bool { return p.bodies.Held() == 0 })
	resp, err := http.Post(px.URL+"/v1/messages", "application/json", strings.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("after the budget came back: status %d", resp.StatusCode)
	}
	waitForServerLinger()
}

// A body's declared length takes no budget until its bytes arrive: eight
// clients that declare 32 MB and send one byte do not lock everyone else
// out.
func TestBodyBudgetIsTakenAsBytesArriveNotAsDeclared(t *testing.T) {
	up := startUpstream(t, apiHandler)
	p, px := startProxyWith(t, testConfig(t, up.URL, true), Options{BodyReadTimeout: 30 * time.Second})
	for range 8 {
		head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\nContent-Length: %d", 32<<20)
		rawRequest(t, px.Listener.Addr().String(), head, "{")
	}
	eventually(t, "the eight promises to hold their first chunks", func() bool { return p.bodies.Held() >= 8*bodyChunk })
	if held := p.bodies.Held(); held > 8*bodyChunk {
		t.Errorf("eight 1-byte bodies that declared 32 MB hold %d bytes of the budget; want at most %d", held, 8*bodyChunk)
	}
	if r := post(t, px.URL, "/v1/messages", requestJSON); r.StatusCode != 200 {
		t.Fatalf("a normal request beside them: status %d", r.StatusCode)
	}
}
