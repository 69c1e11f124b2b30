package proxy

// Inbound keys' tenants on the one upstream key sluice holds: each key
// its own tenant, the key's pacing line taken in turns, and no request
// that blocks the others' share of it.

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
)

// inboundRig is a bubble rig whose sluice holds heldKey and takes the
// sluice keys of entries.
func inboundRig(t *testing.T, upstream http.HandlerFunc, entries []string, edit ...func(*config.Config)) *bubbleRig {
	t.Helper()
	keys := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, keys, entries...)
	in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
	if err != nil {
		t.Fatal(err)
	}
	return newBubbleRigWith(t, true, upstream, Options{Inbound: in}, edit...)
}

// With inbound keys and TENANT_FROM left at its default, each key's
// max_waiting (and weight, max_concurrent) should be its own: bob's
// requests waiting must not shed alice's first one. docs/deploy.md says
// those members are "what the fair order and the per-tenant limits read
// for the key's requests", and does not ask for TENANT_FROM=inbound.
func TestInboundKeysAreTheirOwnTenantsUnderTheDefaultTenantFrom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := sim.New(sim.Config{TTFT: simTTFT, PerToken: 10 * time.Millisecond})
		t.Cleanup(s.Close)
		rig := inboundRig(t, s.ServeHTTP, []string{keyEntry("alice", `"max_waiting":1`), keyEntry("bob", "")},
			func(c *config.Config) { c.MaxConcurrency = 1 })
		c := newTenantClient(t, rig)
		c.send("b1", sluiceKey("bob"))
		settle() // b1 holds the one slot
		c.send("b2", sluiceKey("bob"))
		c.send("b3", sluiceKey("bob"))
		settle() // bob has two waiting
		c.send("a1", sluiceKey("alice"))
		if a := c.answer("a1"); a.status != http.StatusOK {
			t.Errorf("alice's only request: %d %s; want 200 (bob's waiting requests shed alice: every inbound key is the held key's one tenant)", a.status, a.body)
		}
		var names []string
		for _, tc := range rig.proxy.Tenants() {
			if tc.Served+tc.Shed > 0 {
				names = append(names, tc.Tenant)
			}
		}
		if len(names) != 2 {
			t.Errorf("tenants with requests: %v; want alice's and bob's apart", names)
		}
	})
}

// Under rate limiting, fairness across tenants must still hold: with
// inbound keys every tenant spends the one held key, and the key's pacing
// line (buckets.Pacing) sits before the gate; it was one FIFO line,
// so bob's one request waited for all of alice's burst. Its tenants now
// take turns: bob is served within about a round of alice's.
func TestPacingLineTakesTenantsInTurnsUnderOneHeldKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const perMinute = 5 // requests of 64 output tokens the bucket allows
		s := sim.New(sim.Config{TTFT: 50 * time.Millisecond, PerToken: time.Millisecond,
			OutputTokensPerMinute: 64 * perMinute, OutputTokensMin: 64, OutputTokensMax: 64})
		t.Cleanup(s.Close)
		rig := inboundRig(t, s.ServeHTTP, []string{keyEntry("alice", ""), keyEntry("bob", "")},
			func(c *config.Config) {
				c.MaxConcurrency, c.TenantFrom, c.Timeout = 4, config.TenantFromInbound, 10*time.Minute
			})
		c := newTenantClient(t, rig)
		c.send("warm", sluiceKey("alice")) // the buckets are learned from its answer
		c.answer("warm")
		const burst = 12
		for i := range burst {
			c.send(fmt.Sprint("a", i), sluiceKey("alice"))
		}
		settle()
		c.send("bob", sluiceKey("bob"))
		bob := c.answer("bob")
		if bob.status != http.StatusOK {
			t.Fatalf("bob: %d %s", bob.status, bob.body)
		}
		before := 0
		for i := range burst {
			if a := c.answer(fmt.Sprint("a", i)); a.done < bob.done {
				before++
			}
		}
		if before > perMinute+1 {
			t.Errorf("%d of alice's %d requests were answered before bob's one (after %v): the key's pacing line let alice's burst go first", before, burst, bob.done.Round(time.Second))
		}
	})
}

// One request whose max_tokens is past any model's (the API refuses it at
// once, 400, counting nothing) needed a full output bucket in sluice's
// estimate and waited at the head of the key's line for it; with inbound
// keys everyone spends the one held key, so every other tenant's requests
// waited behind it for the bucket to refill whole. An amount larger than
// its whole bucket is now neither waited for nor debited.
func TestAbsurdMaxTokensDoesNotStallTheSharedKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := sim.New(sim.Config{TTFT: 50 * time.Millisecond, PerToken: time.Second,
			OutputTokensPerMinute: 64000, OutputTokensMin: 64, OutputTokensMax: 64})
		t.Cleanup(s.Close)
		// The API's answer to a max_tokens above the model's maximum.
		api := func(w http.ResponseWriter, r *http.Request) {
			b := readAll(t, r.Body)
			if strings.Contains(b, `"max_tokens":1000000000`) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(400)
				fmt.Fprint(w, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 1000000000 > 64000, which is the maximum allowed"}}`)
				return
			}
			r.Body = io.NopCloser(strings.NewReader(b))
			s.ServeHTTP(w, r)
		}
		rig := inboundRig(t, api, []string{keyEntry("mallory", ""), keyEntry("bob", "")},
			func(c *config.Config) { c.TenantFrom, c.Timeout = config.TenantFromInbound, 10*time.Minute })
		c := newTenantClient(t, rig)
		big := strings.Replace(streamRequestJSON, `"max_tokens":64`, `"max_tokens":32000`, 1)
		c.sendBody("warm", sluiceKey("bob"), big) // a 64 s answer; half the bucket in use until it ends
		time.Sleep(time.Second)                   // its headers are in: the buckets are learned
		synctest.Wait()
		c.sendBody("absurd", sluiceKey("mallory"), strings.Replace(requestJSON, `"max_tokens":64`, `"max_tokens":1000000000`, 1))
		settle()
		// bob's small stream: when its response begins is when it got past
		// the key's line and the gate.
		var begun time.Duration
		c.wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, rig.url+"/v1/messages", strings.NewReader(streamRequestJSON))
			req.Header.Set("X-Api-Key", sluiceKey("bob"))
			resp, err := rig.client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			begun = time.Since(c.start)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
		if a := c.answer("absurd"); a.status != 400 {
			t.Fatalf("the absurd request: %d %s", a.status, a.body)
		}
		if begun > 5*time.Second {
			t.Errorf("bob's small stream (64 of a 64,000 bucket, sent at 1 s) began after %v: it waited behind mallory's absurd max_tokens for a full bucket (30 s of refill)", begun.Round(time.Second))
		}
	})
}
