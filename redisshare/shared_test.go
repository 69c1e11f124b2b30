package redisshare

// The shared rate-limit buckets and cache groups, through `sluice serve`
// processes on one real redis-server, in front of the simulator.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sluicebin"
	"github.com/sluicehq/sluice/sim"
)

// simUpstream is a simulator of cfg behind an httptest server.
func simUpstream(t *testing.T, cfg sim.Config) (*sim.Server, *httptest.Server) {
	s := sim.New(cfg)
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); s.Close() })
	return s, srv
}

// post sends body to r's Messages endpoint and returns the status and the
// answer's usage (zero unless 200).
func post(r *sluicebin.Replica, body string, hdr ...string) (int, usage) {
	req, _ := http.NewRequest("POST", r.URL+"/v1/messages", strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("x-api-key", "sk-test")
	req.Header.Set("x-sim-output-tokens", "4")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := sluicebin.Client.Do(req)
	if err != nil {
		return 0, usage{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var msg struct {
		Usage usage `json:"usage"`
	}
	if resp.StatusCode == http.StatusOK {
		json.Unmarshal(b, &msg)
	}
	return resp.StatusCode, msg.Usage
}

type usage struct {
	Input int `json:"input_tokens"`
	Write int `json:"cache_creation_input_tokens"`
	Read  int `json:"cache_read_input_tokens"`
}

func small(i int) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi ` + strconv.Itoa(i) + `"}]}`
}

// TestThreeReplicasOneRateLimit: three replicas on one upstream key whose
// requests-per-minute limit is 300 (a bucket of 300, refilled 5 a
// second) take 350 requests sent together: they fill the limit together,
// the later requests held until the shared bucket has room, with next to
// no 429 (each replica on its own buckets would let 3 × 300 go).
// The limit is learned from one call first (see below).
func TestThreeReplicasOneRateLimit(t *testing.T) {
	const rpm, n = 300, 350
	srv := redistest.Start(t)
	cfg := sim.DefaultConfig()
	cfg.TTFT, cfg.PerToken, cfg.Jitter = 50*time.Millisecond, 0, 0
	cfg.RequestsPerMinute = rpm
	s, up := simUpstream(t, cfg)
	rs := make([]*sluicebin.Replica, 3)
	for i := range rs {
		rs[i] = sluicebin.StartReplica(t, "r"+strconv.Itoa(i), srv.URL, up.URL, 64, "RATE_LIMIT_PACING=buckets",
			"REDIS_TIMEOUT_MS=1000") // what is tested is sharing, not an outage: room for a loaded machine
	}
	// One call first teaches the fleet the key's limits: a key none of
	// whose limits is known yet takes anything (pace.Buckets), so a cold
	// burst of hundreds would all go before the first answer came back.
	if code, _ := post(rs[0], small(-1)); code != http.StatusOK {
		t.Fatalf("the first call: status %d", code)
	}
	status := make([]int, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		if i%25 == 0 {
			time.Sleep(10 * time.Millisecond) // the clients' own pace: 2,500 a second
		}
		wg.Go(func() { status[i], _ = post(rs[i%len(rs)], small(i)) })
	}
	wg.Wait()
	took := time.Since(start)
	codes := map[int]int{}
	for _, c := range status {
		codes[c]++
	}
	st := s.Stats()
	calls, limited := st.Requests, st.ByStatus["429"]
	t.Logf("%d requests in %v: clients saw %v; the upstream answered %d calls, %d of them 429 (%.2f %%)",
		n, took.Round(time.Millisecond), codes, calls, limited, 100*float64(limited)/float64(calls))
	if float64(limited) > 0.01*float64(calls) {
		t.Errorf("%d of %d upstream calls were 429; want at most 1 %%", limited, calls)
	}
	if codes[http.StatusOK] < n*99/100 {
		t.Errorf("%d of %d answered 200; want the limit filled, not refused", codes[http.StatusOK], n)
	}
	// 51 past the bucket of 300, at 5 a second: about 10 s.
	if took < 8*time.Second {
		t.Errorf("took %v: the shared bucket cannot have held the 51 past it (10 s at 5 a second)", took)
	}
}

// cachedBody is a request whose 2,500-token system prompt, marked for
// caching, is shared by every request of the test.
func cachedBody(i int) string { return prefixBody(0, i) }

// prefixBody is cachedBody on prefix p of many.
func prefixBody(p, i int) string {
	system := strings.Repeat("You are a careful agent; read each file before you edit it. ", 160) + strconv.Itoa(p)
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,`+
		`"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],`+
		`"messages":[{"role":"user","content":"question %d"}]}`, system, i)
}

// TestCacheGroupAcrossReplicas: ten requests on one cold prompt prefix,
// split across two replicas while the first is in flight: the fleet pays
// one cache write, and the nine others read it.
func TestCacheGroupAcrossReplicas(t *testing.T) {
	const n = 10
	srv := redistest.Start(t)
	cfg := sim.DefaultConfig()
	cfg.TTFT, cfg.PerToken, cfg.Jitter = 400*time.Millisecond, 0, 0
	s, up := simUpstream(t, cfg)
	rs := []*sluicebin.Replica{
		sluicebin.StartReplica(t, "r0", srv.URL, up.URL, 16, "CACHE_AWARE=1"),
		sluicebin.StartReplica(t, "r1", srv.URL, up.URL, 16, "CACHE_AWARE=1"),
	}
	us := make([]usage, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		if i > 0 {
			time.Sleep(15 * time.Millisecond) // all within the leader's time to first token
		}
		wg.Go(func() { codes[i], us[i] = post(rs[i%2], cachedBody(i)) })
	}
	wg.Wait()
	writes, reads := 0, 0
	for i, u := range us {
		if codes[i] != http.StatusOK {
			t.Fatalf("request %d: status %d", i, codes[i])
		}
		if u.Write > 0 {
			writes++
		}
		if u.Read > 0 {
			reads++
		}
	}
	st := s.Stats()
	t.Logf("writes %d, reads %d; the simulator counted %d tokens written, %d read", writes, reads, st.Tokens.CacheCreation, st.Tokens.CacheRead)
	if writes != 1 || reads != n-1 {
		t.Errorf("%d cache writes and %d reads over two replicas; want 1 and %d", writes, reads, n-1)
	}
	if one := us[0].Write; st.Tokens.CacheCreation != int64(one) {
		t.Errorf("the simulator counted %d tokens written; want one prefix's %d", st.Tokens.CacheCreation, one)
	}
	for _, r := range rs { // no Redis call failed, the cache groups' among them
		if v := r.Metric(t, "sluice_gate_redis_errors_total"); v != 0 {
			t.Errorf("%s: %v Redis calls failed with Redis up", r.Name, v)
		}
	}
}

// TestSharedPartsWhenRedisStops: Redis killed in the middle of a load of
// cached and plain requests on a rate-limited key: every request is
// answered, each replica's buckets and cache groups go over to its own
// (sluice_redis_fallback is 1 for both), and come back when Redis does.
func TestSharedPartsWhenRedisStops(t *testing.T) {
	const n = 200
	srv := redistest.Start(t)
	cfg := sim.DefaultConfig()
	cfg.TTFT, cfg.PerToken, cfg.Jitter = 100*time.Millisecond, 0, 0
	cfg.RequestsPerMinute = 60000
	_, up := simUpstream(t, cfg)
	rs := []*sluicebin.Replica{
		sluicebin.StartReplica(t, "r0", srv.URL, up.URL, 16, "CACHE_AWARE=1", "RATE_LIMIT_PACING=buckets"),
		sluicebin.StartReplica(t, "r1", srv.URL, up.URL, 16, "CACHE_AWARE=1", "RATE_LIMIT_PACING=buckets"),
	}
	codes := make([]int, n)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * 5 * time.Millisecond)))
		if i == n*2/5 {
			srv.Stop()
		}
		body := small(i)
		if i%4 < 2 { // both replicas take both kinds, each on a prefix of its own
			body = prefixBody(i, i)
		}
		wg.Go(func() { codes[i], _ = post(rs[i%2], body) })
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("request %d: status %d; want every request answered 200 with Redis gone", i, c)
		}
	}
	for _, r := range rs {
		for _, part := range []string{"buckets", "cache"} {
			if v := r.Metric(t, `sluice_redis_fallback{part="`+part+`"}`); v != 1 {
				t.Errorf("%s: sluice_redis_fallback{part=%q} = %v with Redis gone; want 1", r.Name, part, v)
			}
		}
	}
	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for _, r := range rs {
		for _, part := range []string{"buckets", "cache"} {
			for r.Metric(t, `sluice_redis_fallback{part="`+part+`"}`) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the shared %s did not resume within 5 s of Redis coming back", r.Name, part)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	if code, _ := post(rs[0], cachedBody(n)); code != http.StatusOK {
		t.Errorf("after Redis came back: status %d", code)
	}
}
