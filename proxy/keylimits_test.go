package proxy

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// Under TENANT_FROM=header a client names its tenant in each request, so
// one inbound key held to max_concurrent 1 and max_waiting 2 got 8 of 10
// requests into the upstream at once by naming 10 tenants. The key's
// limits bind the key, whatever tenants its requests name: 1 in flight at
// the upstream, 2 waiting, 7 shed (issue 23, item 5).
func TestInboundKeyLimitsBindWhateverTheTenantHeader(t *testing.T) {
	for _, from := range []config.TenantFrom{config.TenantFromHeader, config.TenantFromMetadata} {
		t.Run(from.String(), func(t *testing.T) {
			var inFlight, peak atomic.Int32
			hold := make(chan struct{})
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				n := inFlight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				<-hold
				inFlight.Add(-1)
				writeMessage(w)
			})
			keys := filepath.Join(t.TempDir(), "keys.json")
			writeKeys(t, keys, keyEntry("alice", `"max_concurrent":1,"max_waiting":2`))
			in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			cfg := testConfig(t, up.URL, true, func(c *config.Config) { c.TenantFrom, c.InboundKeysFile = from, keys })
			_, srv := startProxyWith(t, cfg, Options{Inbound: in, Logger: slog.New(slog.NewTextHandler(lockedWriter{w: &logs}, nil))})
			logMu.Lock()
			started := logs.String()
			logMu.Unlock()
			if !strings.Contains(started, "TENANT_FROM="+from.String()) || !strings.Contains(started, "max_concurrent") {
				t.Errorf("no line at start saying inbound keys' limits bind the key under TENANT_FROM=%s; the log: %s", from, started)
			}

			var wg sync.WaitGroup
			t.Cleanup(wg.Wait)
			var once sync.Once
			release := func() { once.Do(func() { close(hold) }) }
			t.Cleanup(release) // before wg.Wait and the servers' Close, should the test stop early
			statuses := make(chan int, 10)
			send := func(i int) {
				wg.Go(func() {
					body := requestJSON
					if from == config.TenantFromMetadata {
						body = strings.Replace(requestJSON, `"max_tokens"`, fmt.Sprintf(`"metadata":{"user_id":"user-%d"},"max_tokens"`, i), 1)
					}
					req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(body))
					if from != config.TenantFromMetadata {
						req.Header.Set("X-Sluice-Tenant", fmt.Sprint("tenant-", i))
					}
					req.Header.Set("X-Api-Key", sluiceKey("alice"))
					req.Header.Set("Content-Type", "application/json")
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						statuses <- 0
						return
					}
					readAll(t, resp.Body)
					resp.Body.Close()
					statuses <- resp.StatusCode
				})
			}
			waitFor := func(what string, ok func() bool) {
				t.Helper()
				for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("waited 10 s for %s", what)
					}
				}
			}
			send(0)
			waitFor("the first request at the upstream", func() bool { return inFlight.Load() == 1 })
			for i := 1; i < 10; i++ {
				send(i)
			}
			// The shed are answered at once; the others wait for the
			// upstream, which holds every call until all have arrived
			// where they will.
			shed := 0
			for shed < 7 && peak.Load() <= 1 {
				select {
				case s := <-statuses:
					if s != 429 {
						t.Fatalf("a request answered %d while the upstream holds every call; want 429", s)
					}
					shed++
				case <-time.After(3 * time.Second):
					t.Fatalf("%d answered 529 after 3 s, %d at the upstream (peak %d); want 7 shed, 1 in flight", shed, inFlight.Load(), peak.Load())
				}
			}
			time.Sleep(100 * time.Millisecond) // a window's flush, for any request let past the key's cap
			if p := peak.Load(); p != 1 {
				t.Errorf("%d requests of one key with max_concurrent 1 at the upstream at once, under TENANT_FROM=%s; want 1", p, from)
			}
			release()
			wg.Wait()
			close(statuses)
			ok := 0
			for s := range statuses {
				if s == 200 {
					ok++
				}
			}
			if shed != 7 || ok != 3 {
				t.Errorf("%d shed, %d answered 200; want 7 and 3 (1 in flight, max_waiting 2)", shed, ok)
			}
		})
	}
}
