package proxy

// Attacks by a hostile client or a failing upstream on what issues 13 and
// 14 built: inbound keys, tenants, the fair order, the key buckets. Each
// was a finding when written, and is now a defence that holds.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
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
// line (dispatch.KeyBuckets) sits before the gate; it was one FIFO line,
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

// An upstream (or a gateway before it) that answers 529 with an absurd
// retry-after, 317 years, means: do not retry within this deadline. The
// conversion to a Duration overflowed to a negative wait, and sluice
// retried at once, RETRY_MAX_ATTEMPTS times; retry.After now caps it.
func TestAbsurdRetryAfterIsNotRetriedAtOnce(t *testing.T) {
	for _, v := range []string{"1e10", "Inf"} {
		t.Run(v, func(t *testing.T) {
			var calls atomic.Int32
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Retry-After", v)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(529)
				fmt.Fprint(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			})
			_, srv := startProxy(t, testConfig(t, up.URL, true))
			resp := post(t, srv.URL, "/v1/messages", requestJSON)
			readAll(t, resp.Body)
			if n := calls.Load(); n != 1 {
				t.Errorf("retry-after: %s: the upstream was called %d times; want 1 (a wait past the deadline is not retried)", v, n)
			}
		})
	}
}

// A key limited to some models: count_tokens and batch bodies were checked
// with encoding/json, which matches member names case-insensitively and
// lets the last of two matching names win, while the API matches names
// exactly, so a body the check read as an allowed model could carry
// another under the exact name the upstream reads. Names are now matched
// exactly, and a case variant of a checked name is refused.
func TestModelListHoldsAgainstCaseVariantNames(t *testing.T) {
	var seen atomic.Value
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b := readAll(t, r.Body)
		seen.Store(b)
		writeMessage(w)
	})
	keys := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, keys, keyEntry("haiku-only", `"models":["claude-haiku-4-5"]`))
	in, err := LoadInbound(InboundOptions{KeysFile: keys, UpstreamKey: heldKey})
	if err != nil {
		t.Fatal(err)
	}
	_, srv := startProxyWith(t, testConfig(t, up.URL, true), Options{Inbound: in})
	opus := `{"model":"claude-opus-4-5","Model":"claude-haiku-4-5","messages":[{"role":"user","content":"hi"}]}`
	batch := `{"requests":[{"custom_id":"a","params":{"model":"claude-opus-4-5","max_tokens":8,"messages":[]}}],"Requests":[]}`
	for _, tc := range []struct{ path, body string }{
		{"/v1/messages/count_tokens", opus},
		{"/v1/messages/batches", batch},
	} {
		// Refused either way: 403 for the model, or 400 for a body whose
		// member names differ from the checked ones only in case.
		status, body := send(t, "POST", srv.URL+tc.path, tc.body, "x-api-key", sluiceKey("haiku-only"))
		got, _ := seen.Load().(string)
		if (status != http.StatusForbidden && status != http.StatusBadRequest) || got != "" {
			t.Errorf("POST %s naming claude-opus-4-5 under \"model\" with a haiku-only key: %d %.60s; want 403 or 400, and nothing upstream (the upstream got %s)", tc.path, status, body, got)
		}
	}
	// The same trick on /v1/messages is refused before the check: a
	// decoder that ignores case would read the other model (issue 23).
	msg := `{"model":"claude-opus-4-5","Model":"claude-haiku-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	status, body := send(t, "POST", srv.URL+"/v1/messages", msg, "x-api-key", sluiceKey("haiku-only"))
	if got, _ := seen.Load().(string); status != http.StatusBadRequest || got != "" {
		t.Errorf("POST /v1/messages with a case variant: %d %s; want 400, and nothing upstream (the upstream got %s)", status, body, got)
	}
}

// The key buckets keep at most pace.DefaultMaxKeys keys. A client that
// sends one request with each of 256 made-up keys pushed out, least
// recently used first, what sluice learned of another client's key: that
// key's next request was no longer held for its spent bucket, and met a
// 429. Now the key whose loss costs least goes: a spent one is kept.
func TestMadeUpKeysDoNotEvictASpentKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := sim.New(sim.Config{TTFT: 50 * time.Millisecond, PerToken: time.Millisecond, RequestsPerMinute: 2})
		t.Cleanup(s.Close)
		rig := newBubbleRig(t, true, s.ServeHTTP, func(c *config.Config) { c.RetryMaxAttempts = 1 })
		c := newTenantClient(t, rig)
		c.send("v1", "sk-victim")
		c.answer("v1") // the victim's buckets are learned: one request's worth left
		c.send("v2", "sk-victim")
		c.answer("v2") // spent
		for i := range 256 {
			c.send(fmt.Sprint("m", i), fmt.Sprint("sk-made-up-", i))
			if i%32 == 31 {
				c.wg.Wait()
			}
		}
		c.wg.Wait()
		c.send("v3", "sk-victim")
		if a := c.answer("v3"); a.status != http.StatusOK {
			t.Errorf("the victim's request after 256 made-up keys: %d %.100s; want it held until its bucket refills, then 200", a.status, a.body)
		}
		if n := s.Stats().ByStatus["429"]; n != 0 {
			t.Errorf("the upstream answered %d 429s: sluice forgot the victim's spent bucket", n)
		}
	})
}

// "..;" is no dot segment to path.Clean, but Tomcat and the gateways
// built on it drop a segment's ";parameters" and then read ".." there:
// relayed, /v1/..;/..;/admin would leave UPSTREAM_URL's path prefix on
// such an upstream. A semicolon in the path is refused.
func TestSemicolonDotSegmentsAreRefused(t *testing.T) {
	seen := &upstreamSeen{}
	up := startUpstream(t, seen.handler)
	_, px := startProxy(t, testConfig(t, up.URL+"/anthropic", true))
	addr := px.Listener.Addr().String()
	for _, line := range []string{"GET /v1/..;/..;/admin HTTP/1.1", "GET /v1/%2e%2e;/%2e%2e;/admin HTTP/1.1", "GET /v1/models/..;x=1/..;/..;/admin HTTP/1.1"} {
		conn := rawRequest(t, addr, line+"\r\nHost: "+addr+"\r\nX-Api-Key: sk-test", "")
		resp, _ := readAnswer(t, conn, bufio.NewReader(conn))
		if resp.StatusCode < 400 {
			t.Errorf("%s: %d; want it refused like a dot segment", line, resp.StatusCode)
		}
	}
	if n := seen.count(); n != 0 {
		t.Errorf("the upstream saw %v", seen.paths)
	}
}

// Headers that CGI-style gateways (and nginx with underscores_in_headers)
// read as X-Forwarded-For or X-Real-IP: a spelling with underscores
// canonicalises to another name in Go, and reached the upstream; they are
// dropped like the others now.
func TestUnderscoreForwardedHeadersAreDropped(t *testing.T) {
	seen := &upstreamSeen{}
	up := startUpstream(t, seen.handler)
	_, px := startProxy(t, testConfig(t, up.URL, false))
	addr := px.Listener.Addr().String()
	conn := rawRequest(t, addr, "GET /v1/models HTTP/1.1\r\nHost: "+addr+"\r\nX-Api-Key: sk-test\r\nX_Forwarded_For: 203.0.113.9\r\nX_Real_IP: 203.0.113.9", "")
	readAnswer(t, conn, bufio.NewReader(conn))
	if seen.count() != 1 {
		t.Fatalf("the upstream saw %d requests", seen.count())
	}
	for k := range seen.heads[0] {
		if strings.Contains(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "forwarded") || strings.Contains(strings.ToLower(k), "real") {
			t.Errorf("the upstream got %s: %q", k, seen.heads[0].Get(k))
		}
	}
}

// A client that opens a TCP connection to the TLS listener and never
// sends its ClientHello is cut off by the header timeout (10 s), like one
// that never sends its request line: a handshake holds nothing forever.
func TestSilentTLSHandshakeIsCut(t *testing.T) {
	certPEM, keyPEM, _ := testCert(t, 1)
	f := startTLSProxy(t, startUpstream(t, apiHandler).URL, certPEM, keyPEM)
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.url, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	conn.SetReadDeadline(start.Add(20 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the silent connection was still open after %v", time.Since(start).Round(time.Second))
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("closed after %v; want about 10 s", took)
	}
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
