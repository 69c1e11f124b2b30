package proxy

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// fleetTools is a tool list of about 1,530 tokens, with no breakpoint.
var fleetTools = `[{"name":"read_file","description":` + strconv.Quote(strings.Repeat("Read a file of the repository and return its text. ", 120)) + `}]`

// fleetBody is a streaming request of a fleet's agent: fleetTools, then a
// first system block of its own (no breakpoint), then sharedSystem with a
// breakpoint.
func fleetBody(first string) string {
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"tools":%s,`+
		`"system":[{"type":"text","text":%q},{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],`+
		`"messages":[{"role":"user","content":"go"}]}`, fleetTools, first, sharedSystem)
}

// Agents whose prompts differ only in their first system block, one after
// the other, on both paths: every one writes the prefix; the first is
// new, the others are put down to system[0], each with the tools' tokens
// as what it could have read; the same prompt again within the entry's
// TTL reads it and is not counted; a later turn of it that appends a
// message writes only what was appended.
func TestCacheWritesExplained(t *testing.T) {
	for _, windowed := range []bool{false, true} {
		t.Run(fmt.Sprintf("windowed=%v", windowed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := sim.New(sim.Config{TTFT: simTTFT, PerToken: time.Millisecond})
				t.Cleanup(s.Close)
				rig := newBubbleRig(t, windowed, s.ServeHTTP, func(c *config.Config) { c.CacheAware = true })
				var log strings.Builder
				rig.proxy.log = slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))
				for _, first := range []string{"agent one", "agent two", "agent three", "agent one"} {
					if status, _ := sendStream(t, rig, fleetBody(first)); status != http.StatusOK {
						t.Fatalf("status %d", status)
					}
				}
				next := strings.Replace(fleetBody("agent one"), `"content":"go"}]`,
					`"content":"go"},{"role":"assistant","content":"done"},{"role":"user","content":[{"type":"text","text":"more","cache_control":{"type":"ephemeral"}}]}]`, 1)
				if status, u := sendStream(t, rig, next); status != http.StatusOK || u.Read == 0 || u.Write == 0 {
					t.Fatalf("the next turn: status %d, usage %+v; want a read of the prefix and a write of the rest", status, u)
				}
				_, bs, _ := request.ParseBlocks([]byte(fleetBody("x")), nil)
				tools := bs[0].Tokens
				wantMetrics(t, rig,
					`sluice_cache_miss_block_total{block="new"} 1`,
					`sluice_cache_miss_block_total{block="system[0]"} 2`,
					`sluice_cache_miss_block_total{block="appended"} 1`,
					`sluice_cache_miss_tokens_total{block="new"} 0`,
					fmt.Sprintf(`sluice_cache_miss_tokens_total{block="system[0]"} %d`, 2*tools),
					`sluice_cache_miss_tokens_total{block="appended"} 0`,
				)
				synctest.Wait()
				lines := strings.Split(strings.TrimSpace(log.String()), "\n")
				var got []string
				for _, l := range lines {
					if strings.Contains(l, "msg=request") {
						i := strings.Index(l, "cache_miss_block=")
						got = append(got, strings.Fields(l[i:])[0]+" "+strings.Fields(l[i:])[1])
					}
				}
				want := []string{"cache_miss_block=new cache_miss_tokens=0",
					fmt.Sprintf("cache_miss_block=system[0] cache_miss_tokens=%d", tools),
					fmt.Sprintf("cache_miss_block=system[0] cache_miss_tokens=%d", tools),
					`cache_miss_block="" cache_miss_tokens=0`,
					"cache_miss_block=appended cache_miss_tokens=0"}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("access lines say %q; want %q", got, want)
				}
				if got := rig.proxy.CacheWrites(); len(got) != 3 || got[0].Block != "system[0]" || got[0].Writes != 2 || got[0].Tokens != int64(2*tools) {
					t.Errorf("CacheWrites() = %+v; want system[0] first, 2 writes of %d tokens", got, 2*tools)
				}
			})
		})
	}
}

// Against an upstream that caches nothing sluice believes it caches (the
// simulator with a minimum cacheable length far above the prompt), three
// bursts in a row form groups whose followers read nothing: then sluice
// stops holding on that prefix, says so once in its log and its metrics,
// and the next burst goes at once. Against one that caches it, the
// groups go on forming.
func TestCacheDoubtThroughSimulator(t *testing.T) {
	for _, caches := range []bool{false, true} {
		t.Run(fmt.Sprintf("upstream-caches=%v", caches), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := sim.Config{TTFT: simTTFT, PerToken: 10 * time.Millisecond}
				if !caches {
					cfg.MinCacheTokens = 1 << 20
				}
				s := sim.New(cfg)
				t.Cleanup(s.Close)
				// The proxy's log and CACHE_AWARE's, as sluice serve gives
				// both the one.
				var log strings.Builder
				rig := newBubbleRigWith(t, true, s.ServeHTTP, Options{Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil))},
					func(c *config.Config) { c.CacheAware, c.MaxConcurrency = true, 4 })
				burst := func() {
					var wg sync.WaitGroup
					for i := range 4 {
						wg.Go(func() {
							if status, _ := sendStream(t, rig, sharedPrefixBody(i)); status != http.StatusOK {
								t.Errorf("status %d", status)
							}
						})
					}
					wg.Wait()
				}
				for i := range 4 {
					if i > 0 {
						time.Sleep(6 * time.Minute) // past the prefix's TTL: cold again
					}
					burst()
				}
				synctest.Wait()
				logs := log.String()
				groups, distrusted, followers := "4", "0", "12"
				if !caches {
					groups, distrusted, followers = "3", "1", "9"
				}
				wantMetrics(t, rig,
					`sluice_cache_groups_total `+groups,
					fmt.Sprintf(`sluice_cache_requests_total{role="follower"} %s`, followers),
					`sluice_cache_distrusted_prefixes `+distrusted,
				)
				n := strings.Count(logs, "followers held for a prefix read none of it")
				if want, _ := strconv.Atoi(distrusted); n != want {
					t.Errorf("%d log lines say the prefix is not held on; want %d:\n%s", n, want, logs)
				}
				if !caches {
					wantMetrics(t, rig, `sluice_cache_distrust_total{event="distrusted"} 1`)
					// The fourth burst went at once: no role, no hold.
					tail := logs[strings.LastIndex(logs, "read none of it"):]
					if c := strings.Count(tail, `cache="" cache_hold_ms=0`); c != 4 {
						t.Errorf("%d access lines after the doubt went without a role; want the 4 of the last burst:\n%s", c, tail)
					}
				}
			})
		})
	}
}
