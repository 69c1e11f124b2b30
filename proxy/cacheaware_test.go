package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	sdkv2 "github.com/anthropics/anthropic-sdk-go/v2"
	optv2 "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/sim"
)

// sharedSystem is a system prompt of about 2,500 tokens, over
// claude-sonnet-4-5's minimum cacheable length of 1,024.
var sharedSystem = strings.Repeat("You are a careful agent; read each file before you edit it. ", 160)

// sharedPrefixBody is a streaming request whose system prompt, marked
// for caching, is sharedSystem, and whose question is its own.
func sharedPrefixBody(i int) string {
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":64,"stream":true,`+
		`"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],`+
		`"messages":[{"role":"user","content":"question %d"}]}`, sharedSystem, i)
}

// cacheUsage is the cache part of a response's usage.
type cacheUsage struct {
	Write int `json:"cache_creation_input_tokens"`
	Read  int `json:"cache_read_input_tokens"`
}

// startUsage reads a stream to its end and returns its message_start's
// usage.
func startUsage(t *testing.T, resp *http.Response) cacheUsage {
	t.Helper()
	defer resp.Body.Close()
	var u cacheUsage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || !strings.Contains(data, `"message_start"`) {
			continue
		}
		var ev struct {
			Message struct {
				Usage cacheUsage `json:"usage"`
			} `json:"message"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Errorf("message_start: %v", err)
		}
		u = ev.Message.Usage
	}
	return u
}

// simTTFT is the time to first token of the simulator behind simRig.
const simTTFT = 400 * time.Millisecond

// simRig is a bubble rig, windowed, in front of a simulator whose answers
// begin after simTTFT and take 10 ms a token, with edits to sluice's
// configuration applied.
func simRig(t *testing.T, edit ...func(*config.Config)) *bubbleRig {
	t.Helper()
	s := sim.New(sim.Config{TTFT: simTTFT, PerToken: 10 * time.Millisecond})
	t.Cleanup(s.Close)
	return newBubbleRig(t, true, s.ServeHTTP, edit...)
}

// sendStream posts a streaming body through rig with the headers hdr
// (name, value pairs) and returns the status and, for a 200, the usage
// its message_start reported.
func sendStream(t *testing.T, rig *bubbleRig, body string, hdr ...string) (int, cacheUsage) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, rig.url+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Api-Key", "sk-test")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := rig.client.Do(req)
	if err != nil {
		t.Error(err)
		return 0, cacheUsage{}
	}
	if resp.StatusCode != http.StatusOK {
		readAll(t, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, cacheUsage{}
	}
	return resp.StatusCode, startUsage(t, resp)
}

// countUsage counts the writes and reads among us, and checks that each
// write or read is of the whole prefix.
func countUsage(t *testing.T, us []cacheUsage) (writes, reads int) {
	t.Helper()
	prefix := 0
	for _, u := range us {
		switch {
		case u.Write > 0 && u.Read == 0:
			writes++
			prefix = max(prefix, u.Write)
		case u.Read > 0 && u.Write == 0:
			reads++
			prefix = max(prefix, u.Read)
		default:
			t.Errorf("usage %+v: want a write or a read of the prefix", u)
		}
	}
	for _, u := range us {
		if n := u.Write + u.Read; n != prefix {
			t.Errorf("usage %+v: want %d tokens of prefix written or read", u, prefix)
		}
	}
	return writes, reads
}

// burst sends n streaming requests sharing a cached system prompt
// (sharedPrefixBody) through rig at once, and returns the cache usage of
// each one's answer.
func burst(t *testing.T, rig *bubbleRig, n int) []cacheUsage {
	t.Helper()
	us := make([]cacheUsage, n)
	var wg sync.WaitGroup
	for i := range us {
		wg.Go(func() {
			var status int
			if status, us[i] = sendStream(t, rig, sharedPrefixBody(i)); status != http.StatusOK {
				t.Errorf("status %d", status)
			}
		})
	}
	wg.Wait()
	return us
}

// A burst of streaming requests sharing a cached system prompt, through
// sluice to the simulator (whose cache entry appears once the first
// response has begun): with CACHE_AWARE one request writes the prefix and
// the others read it; without it, every one writes it.
func TestSharedPrefixBurstThroughSimulator(t *testing.T) {
	const n = 8
	for _, aware := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache-aware=%v", aware), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rig := simRig(t, func(c *config.Config) {
					c.CacheAware = aware
					c.MaxConcurrency = n
				})
				var log strings.Builder
				rig.proxy.log = slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))
				us := burst(t, rig, n)
				writes, reads := countUsage(t, us)
				wantWrites, wantReads := 1, n-1
				if !aware {
					wantWrites, wantReads = n, 0
				}
				if writes != wantWrites || reads != wantReads {
					t.Errorf("%d cache writes and %d reads; want %d and %d", writes, reads, wantWrites, wantReads)
				}
				if !aware {
					return
				}
				prefix := us[0].Write + us[0].Read
				wantMetrics(t, rig,
					`sluice_cache_groups_total 1`,
					`sluice_cache_requests_total{role="leader"} 1`,
					fmt.Sprintf(`sluice_cache_requests_total{role="follower"} %d`, n-1),
					fmt.Sprintf(`sluice_cache_hold_seconds_count{released="begun"} %d`, n-1),
					fmt.Sprintf(`sluice_tokens_total{kind="cache_write",model="claude-sonnet-4-5"} %d`, prefix),
					fmt.Sprintf(`sluice_tokens_total{kind="cache_read",model="claude-sonnet-4-5"} %d`, (n-1)*prefix),
				)
				// Each follower read the prefix instead of writing it: 1.25 − 0.1
				// of claude-sonnet-4-5's $3 per million input tokens.
				want := float64((n-1)*prefix) * 1.15 * 3 / 1e6
				if got := metricValue(t, rig, "sluice_cache_savings_usd_total"); math.Abs(got-want) > 1e-9 {
					t.Errorf("sluice_cache_savings_usd_total = %g; want %g", got, want)
				}
				synctest.Wait() // each access line is written just after its answer (see deliver)
				logs := log.String()
				if got := strings.Count(logs, "cache=leader"); got != 1 {
					t.Errorf("%d access lines say cache=leader; want 1:\n%s", got, logs)
				}
				// The followers waited for the leader's first token, 400 ms.
				if got := strings.Count(logs, "cache=follower cache_hold_ms=400"); got != n-1 {
					t.Errorf("%d access lines say cache=follower cache_hold=400ms; want %d:\n%s", got, n-1, logs)
				}
			})
		})
	}
}

// scrape is rig's /metrics text.
func scrape(t *testing.T, rig *bubbleRig) string {
	t.Helper()
	resp, err := rig.client.Get(rig.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return readAll(t, resp.Body)
}

// wantMetrics checks that /metrics has each of the lines want.
func wantMetrics(t *testing.T, rig *bubbleRig, want ...string) {
	t.Helper()
	text := scrape(t, rig)
	for _, w := range want {
		if !strings.Contains(text, w+"\n") {
			t.Errorf("/metrics lacks %q", w)
		}
	}
}

// metricValue is the value of the unlabelled metric name on /metrics.
func metricValue(t *testing.T, rig *bubbleRig, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(scrape(t, rig), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// The same through the official Go SDK: the usage its clients see proves
// one write and N−1 reads.
func TestSharedPrefixBurstThroughSDK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 6
		rig := simRig(t)
		client := sdkv2.NewClient(optv2.WithAPIKey("sk-test"), optv2.WithBaseURL(rig.url),
			optv2.WithHTTPClient(rig.client), optv2.WithMaxRetries(0))
		us := make([]cacheUsage, n)
		var wg sync.WaitGroup
		for i := range us {
			wg.Go(func() {
				stream := client.Messages.NewStreaming(context.Background(), sharedParamsV2(i))
				var acc sdkv2.Message
				for stream.Next() {
					if err := acc.Accumulate(stream.Current()); err != nil {
						t.Error(err)
					}
				}
				if err := stream.Err(); err != nil {
					t.Error(err)
				}
				us[i] = cacheUsage{Write: int(acc.Usage.CacheCreationInputTokens), Read: int(acc.Usage.CacheReadInputTokens)}
			})
		}
		wg.Wait()
		if writes, reads := countUsage(t, us); writes != 1 || reads != n-1 {
			t.Errorf("%d cache writes and %d reads seen by the SDK; want 1 and %d", writes, reads, n-1)
		}
	})
}

// claudeCodeBody is a request shaped like a coding agent's (the public
// request format of Claude Code 2.1: written here, no prompt copied): a
// system prompt in two blocks, the last marked for caching, a dozen tools,
// adaptive thinking, output_config, context_management, metadata, a
// system turn among the messages, and the last user block marked too.
func claudeCodeBody(session int) string {
	var tools []string
	for i := range 12 {
		tools = append(tools, fmt.Sprintf(`{"name":"tool_%d","description":%q,"input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}`,
			i, strings.Repeat("Reads or changes files of the project in a careful way. ", 10)))
	}
	return `{"model":"claude-sonnet-4-5","max_tokens":32000,"stream":true,` +
		`"thinking":{"type":"adaptive"},"output_config":{"effort":"medium"},` +
		`"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]},` +
		fmt.Sprintf(`"metadata":{"user_id":"user_0_account_0_session_%d"},`, session) +
		`"system":[{"type":"text","text":"You are an agent for software engineering."},` +
		fmt.Sprintf(`{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],`, sharedSystem) +
		`"tools":[` + strings.Join(tools, ",") + `],` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"<reminder>the date is today</reminder>"},` +
		fmt.Sprintf(`{"type":"text","text":"session %d: fix the failing test","cache_control":{"type":"ephemeral"}}]},`, session) +
		`{"role":"system","content":"The user may interrupt at any time."}]}`
}

// Sessions of a coding agent starting together: the simulator accepts
// their bodies, and sluice groups them on the system prompt and tools they
// share (the longest prefix it knows), though each ends in a message of
// its own: one session writes the shared prefix, the others read it and
// write only their own messages.
func TestClaudeCodeSessionsGroupOnSharedPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 4
		rig := simRig(t)
		us := make([]cacheUsage, n)
		var wg sync.WaitGroup
		for i := range us {
			wg.Go(func() {
				var status int
				status, us[i] = sendStream(t, rig, claudeCodeBody(i), "Authorization", "Bearer sk-test", "Anthropic-Version", "2026-10-21")
				if status != http.StatusOK {
					t.Errorf("session %d: status %d", i, status)
				}
			})
		}
		wg.Wait()
		leaders, shared := 0, 0
		for _, u := range us {
			if u.Read == 0 {
				leaders++
				shared = u.Write
			}
		}
		for _, u := range us {
			if u.Read > 0 && (u.Write <= 0 || u.Write >= u.Read || u.Read >= shared) {
				t.Errorf("follower usage %+v: want a read of the shared prefix and a small write of its own messages", u)
			}
		}
		if leaders != 1 {
			t.Errorf("usage %+v: %d sessions read nothing; want 1, the leader", us, leaders)
		}
	})
}

// A leader that fails costs its followers one more time to first token at
// most: the first follower is promoted as the leader fails, writes the
// prefix, and the others read it once its response has begun.
func TestFailingLeaderPromotesThroughSimulator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, ttft = 5, simTTFT
		rig := simRig(t, func(c *config.Config) { c.RetryMaxAttempts = 1 })
		var log strings.Builder
		rig.proxy.log = slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))
		var wg sync.WaitGroup
		var leaderStatus int
		wg.Go(func() { leaderStatus, _ = sendStream(t, rig, sharedPrefixBody(0), "X-Sim-Fault", "500") })
		synctest.Wait() // the failing request is first in line
		us := make([]cacheUsage, n-1)
		for i := range us {
			wg.Go(func() { _, us[i] = sendStream(t, rig, sharedPrefixBody(i+1)) })
		}
		wg.Wait()
		if leaderStatus != http.StatusInternalServerError {
			t.Errorf("leader status %d; want the injected 500", leaderStatus)
		}
		if writes, reads := countUsage(t, us); writes != 1 || reads != n-2 {
			t.Errorf("%d cache writes and %d reads among the followers; want 1 and %d", writes, reads, n-2)
		}
		synctest.Wait() // each access line is written just after its answer (see deliver)
		logs := log.String()
		if got := strings.Count(logs, "cache=leader"); got != 2 {
			t.Errorf("%d access lines say cache=leader; want 2, the failed one and the promoted one:\n%s", got, logs)
		}
		if got := strings.Count(logs, "cache=follower"); got != n-2 {
			t.Errorf("%d access lines say cache=follower; want %d", got, n-2)
		}
		// The others waited for the promoted leader's first token: one
		// time to first token, and what the failure itself took.
		for _, line := range strings.Split(logs, "\n") {
			_, hold, ok := strings.Cut(line, "cache=follower cache_hold_ms=")
			if !ok {
				continue
			}
			d, err := time.ParseDuration(strings.Fields(hold)[0] + "ms")
			if err != nil || d < ttft || d > ttft+10*time.Millisecond {
				t.Errorf("a follower was held %s; want one time to first token, %s", hold, ttft)
			}
		}
	})
}

// An operator's [prices] may price a cache read above a cache write (a
// negotiated rate, or a typo): a follower's read then saved nothing, and
// its answer is counted as any other. sluice_cache_savings_usd_total is a
// counter, whose Add of the negative saving panicked in the middle of the
// followers' streams.
func TestCacheSavingsNeverNegative(t *testing.T) {
	const n = 3
	synctest.Test(t, func(t *testing.T) {
		prices, err := price.New(map[string]price.Rates{"claude-sonnet-4-5": {Input: 3, Output: 15, CacheWrite5m: 1, CacheWrite1h: 1, CacheRead: 2}})
		if err != nil {
			t.Fatal(err)
		}
		rig := simRig(t, func(c *config.Config) {
			c.CacheAware, c.MaxConcurrency, c.Prices = true, n, prices
		})
		log := rig.logs()
		if _, reads := countUsage(t, burst(t, rig, n)); reads != n-1 {
			t.Fatalf("%d cache reads; want %d", reads, n-1)
		}
		synctest.Wait()
		wantMetrics(t, rig, fmt.Sprintf(`sluice_cache_requests_total{role="follower"} %d`, n-1))
		if got := metricValue(t, rig, "sluice_cache_savings_usd_total"); got != 0 {
			t.Errorf("sluice_cache_savings_usd_total = %g; want 0: a read dearer than a write saved nothing", got)
		}
		if got := strings.Count(log.String(), "level=INFO msg=request "); got != n || strings.Contains(log.String(), "panic") {
			t.Errorf("%d access lines; want %d, and no panic:\n%s", got, n, log.String())
		}
	})
}
