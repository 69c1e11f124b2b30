package proxy

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// tenantAnswer is how one request of a tenant test ended.
type tenantAnswer struct {
	status     int
	retryAfter string
	body       string
	done       time.Duration // since the test's start
}

// tenantClient sends Messages requests through a bubble rig, each with
// its own API key, and keeps their answers.
type tenantClient struct {
	t     *testing.T
	rig   *bubbleRig
	start time.Time
	wg    sync.WaitGroup
	mu    sync.Mutex
	got   map[string]*tenantAnswer
}

func newTenantClient(t *testing.T, rig *bubbleRig) *tenantClient {
	return &tenantClient{t: t, rig: rig, start: time.Now(), got: map[string]*tenantAnswer{}}
}

// send posts requestJSON with key (and the header pairs hdr) as the
// request called name, in the background.
func (c *tenantClient) send(name, key string, hdr ...string) {
	c.sendBody(name, key, requestJSON, hdr...)
}

// sendBody is send with a body of the caller's.
func (c *tenantClient) sendBody(name, key, body string, hdr ...string) {
	c.wg.Go(func() {
		req, _ := http.NewRequest(http.MethodPost, c.rig.url+"/v1/messages", strings.NewReader(body))
		req.Header.Set("X-Api-Key", key)
		req.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.rig.client.Do(req)
		if err != nil {
			c.t.Error(err)
			return
		}
		body := readAll(c.t, resp.Body)
		resp.Body.Close()
		c.mu.Lock()
		c.got[name] = &tenantAnswer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: body, done: time.Since(c.start)}
		c.mu.Unlock()
	})
}

// answer is the answer to the request called name, once all are in.
func (c *tenantClient) answer(name string) *tenantAnswer {
	c.wg.Wait()
	if a := c.got[name]; a != nil {
		return a
	}
	c.t.Fatalf("no answer to %s", name)
	return nil
}

// A tenant past TENANT_MAX_WAITING is shed with 429 and retry-after; a
// tenant at TENANT_MAX_CONCURRENT waits while another takes the free
// slots; the other tenant is neither shed nor held behind it.
func TestTenantLimitsShedOnlyThatTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := sim.New(sim.Config{TTFT: simTTFT, PerToken: 10 * time.Millisecond})
		t.Cleanup(s.Close)
		rig := newBubbleRig(t, true, s.ServeHTTP, func(c *config.Config) {
			c.MaxConcurrency, c.TenantMaxConcurrent, c.TenantMaxWaiting = 4, 1, 2
		})
		c := newTenantClient(t, rig)
		c.send("a1", "sk-tenant-a")
		settle() // a1 holds a slot: a's one
		c.send("a2", "sk-tenant-a")
		c.send("a3", "sk-tenant-a")
		settle() // a2 and a3 wait: a's two
		c.send("a4", "sk-tenant-a")
		c.send("b1", "sk-tenant-b")
		c.send("b2", "sk-tenant-b")

		a4 := c.answer("a4")
		wantShape(t, a4, 429, "rate_limit_error", "TENANT_MAX_WAITING")
		if a4.retryAfter == "" {
			t.Error("a shed tenant's 429 has no retry-after")
		}
		for _, name := range []string{"a1", "a2", "a3", "b1", "b2"} {
			if a := c.answer(name); a.status != http.StatusOK {
				t.Errorf("%s: status %d (%s); want 200", name, a.status, a.body)
			}
		}
		// b took a free slot at once, while a's waiting requests went one
		// at a time behind a1 (and b's second behind its first: the limit
		// is every tenant's).
		first, second := c.answer("b1"), c.answer("b2")
		if first.done > second.done {
			first = second
		}
		if a2 := c.answer("a2"); first.done >= a2.done {
			t.Errorf("b's first answer after %v, a2's after %v: b waited behind a's limit", first.done, a2.done)
		}
		if peak := s.Stats().PeakInflight; peak != 2 {
			t.Errorf("peak upstream calls %d; want 2 (one of each tenant's, though 4 slots)", peak)
		}
		counts := map[string]int64{}
		for _, tc := range rig.proxy.tenantCounts() {
			counts[tc.Tenant] = tc.Shed*100 + tc.Served
		}
		a := request.Tenant(http.Header{"X-Api-Key": {"sk-tenant-a"}})
		b := request.Tenant(http.Header{"X-Api-Key": {"sk-tenant-b"}})
		if counts[a] != 1*100+3 || counts[b] != 2 {
			t.Errorf("tenant a shed %d served %d, b shed %d served %d; want 1 3, 0 2", counts[a]/100, counts[a]%100, counts[b]/100, counts[b]%100)
		}
	})
}

// settle lets a bubble's requests through their window (BATCH_MAX_WAIT_MS
// of 1 ms in the tests) to wherever they wait next.
func settle() {
	time.Sleep(5 * time.Millisecond)
	synctest.Wait()
}

// wantShape checks an answer's status, Anthropic error type and hint.
func wantShape(t *testing.T, a *tenantAnswer, status int, errType, hint string) {
	t.Helper()
	if a.status != status || !strings.Contains(a.body, `"type":"error"`) || !strings.Contains(a.body, `"type":"`+errType+`"`) || !strings.Contains(a.body, hint) {
		t.Errorf("answer %d %s; want %d %s saying %s", a.status, a.body, status, errType, hint)
	}
}

// With GATE_ORDER=fair a tenant that sends one request behind another's
// burst is served next; with fifo it waits for the whole burst.
func TestFairOrderThroughHTTP(t *testing.T) {
	for _, order := range []config.GateOrder{config.GateOrderFair, config.GateOrderFIFO} {
		t.Run(order.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := sim.New(sim.Config{TTFT: simTTFT, PerToken: 10 * time.Millisecond})
				t.Cleanup(s.Close)
				rig := newBubbleRig(t, true, s.ServeHTTP, func(c *config.Config) {
					c.MaxConcurrency, c.GateOrder = 1, order
				})
				c := newTenantClient(t, rig)
				const burst = 12
				for i := range burst {
					c.send("a"+string(rune('a'+i)), "sk-burst")
				}
				settle()
				c.send("b", "sk-steady")
				b := c.answer("b")
				before := 0
				for name, a := range c.got {
					if name != "b" && a.done < b.done {
						before++
					}
				}
				want := map[config.GateOrder]int{config.GateOrderFair: 1, config.GateOrderFIFO: burst}[order]
				if before != want {
					t.Errorf("%d of the burst were answered before the steady tenant's request; want %d", before, want)
				}
			})
		})
	}
}
