package sim

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// These tests run in virtual time: sleeps inside the simulator advance a
// fake clock, so they are exact and instant.

// timed runs a request and reports how long it took in (virtual) time.
func timed(s *Server, body string, hdr ...string) (time.Duration, int) {
	start := time.Now()
	w := call(s, "POST", "/v1/messages", body, hdr...)
	return time.Since(start), w.Code
}

// within allows one sharing step either way: a request notices a change in
// load at its next step.
func within(d, want time.Duration) bool { return d >= want-shareStep && d <= want+shareStep }

func TestLatencyAndCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{TTFT: time.Second, PerToken: 10 * time.Millisecond, Capacity: 2, OverloadAt: 4})
		defer s.Close()
		// Alone: TTFT plus 99 more tokens.
		if d, _ := timed(s, helloBody, "x-sim-output-tokens", "100"); d != time.Second+990*time.Millisecond {
			t.Errorf("alone: %v; want 1.99s", d)
		}
		// Four at once on two slots: each runs at half speed, twice as long.
		var wg sync.WaitGroup
		times := make([]time.Duration, 4)
		for i := range times {
			wg.Go(func() { times[i], _ = timed(s, helloBody, "x-sim-output-tokens", "100") })
		}
		synctest.Wait()
		if d, code := timed(s, helloBody); code != 529 || d != 0 {
			t.Errorf("fifth request at OverloadAt=4: %d after %v; want 529 at once", code, d)
		}
		wg.Wait()
		for i, d := range times {
			if !within(d, 2*(time.Second+990*time.Millisecond)) {
				t.Errorf("request %d of 4 on 2 slots took %v; want 3.98s", i, d)
			}
		}
		if st := s.Stats(); st.PeakInflight != 4 || st.ByStatus["529"] != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestStreamPacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{TTFT: 500 * time.Millisecond, PerToken: 100 * time.Millisecond})
		defer s.Close()
		body := `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		if d, _ := timed(s, body, "x-sim-output-tokens", "10"); d != 500*time.Millisecond+900*time.Millisecond {
			t.Errorf("streamed 10 tokens in %v; want 1.4s", d)
		}
	})
}

func TestSlowStreamFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{SlowStreamInterval: time.Second})
		defer s.Close()
		body := `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		// 9 events (see TestStreamShape), a second between each.
		if d, code := timed(s, body, "x-sim-output-tokens", "9", "x-sim-fault", "slow-stream"); code != 200 || d != 8*time.Second {
			t.Errorf("slow-stream: %d in %v; want 200 in 8s", code, d)
		}
	})
}

func TestSpikeSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{TTFT: time.Second, Spikes: []Spike{{From: 0, To: 10 * time.Second, Factor: 3}}})
		defer s.Close()
		if d, _ := timed(s, helloBody, "x-sim-output-tokens", "1"); !within(d, 3*time.Second) {
			t.Errorf("in spike: %v; want 3s", d)
		}
		time.Sleep(7 * time.Second)
		if d, _ := timed(s, helloBody, "x-sim-output-tokens", "1"); !within(d, time.Second) {
			t.Errorf("after spike: %v; want 1s", d)
		}
	})
}

// TestCapacitySteps steps the upstream from 4 slots to 1 and back: four
// calls at once run at full speed, then at a quarter with 529 from the
// second step's threshold, then at full speed again.
func TestCapacitySteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{TTFT: time.Second, Capacity: 4, OverloadAt: 8,
			CapacitySteps: []CapacityStep{{From: 10 * time.Second, Capacity: 1, OverloadAt: 4}, {From: 30 * time.Second, Capacity: 4}}})
		defer s.Close()
		// four sends four calls at once and, while they run, a fifth; it
		// returns the four's times and the fifth's status.
		four := func() ([]time.Duration, int) {
			var wg sync.WaitGroup
			times := make([]time.Duration, 4)
			for i := range times {
				wg.Go(func() { times[i], _ = timed(s, helloBody, "x-sim-output-tokens", "1") })
			}
			synctest.Wait()
			fifth := make(chan int, 1)
			wg.Go(func() { _, code := timed(s, helloBody, "x-sim-output-tokens", "1"); fifth <- code })
			wg.Wait()
			return times, <-fifth
		}
		for _, step := range []struct {
			name      string
			each      time.Duration
			fifth     int
			sleepNext time.Duration
		}{
			{"capacity 4, 529 at 8", time.Second, 200, 10 * time.Second},
			{"capacity 1, 529 at 4", 4 * time.Second, 529, 20 * time.Second},
			{"capacity 4 again, no 529", time.Second, 200, 0},
		} {
			times, fifth := four()
			for i, d := range times {
				// The fifth, when admitted, shares the slots for part of the time.
				if d < step.each-5*shareStep || d > step.each*5/4+shareStep {
					t.Errorf("%s: call %d of 4 took %v; want about %v", step.name, i, d, step.each)
				}
			}
			if fifth != step.fifth {
				t.Errorf("%s: a fifth call got %d; want %d", step.name, fifth, step.fifth)
			}
			time.Sleep(step.sleepNext)
		}
	})
}

func TestCapacityStepsFlag(t *testing.T) {
	var l stepList
	if err := l.Set("20s:8:12, 40s:32"); err != nil {
		t.Fatal(err)
	}
	want := stepList{{From: 20 * time.Second, Capacity: 8, OverloadAt: 12}, {From: 40 * time.Second, Capacity: 32}}
	if fmt.Sprint(l) != fmt.Sprint(want) {
		t.Errorf("Set = %v; want %v", l, want)
	}
	for _, bad := range []string{"20s", "x:8", "20s:-1", "20s:8:y", "40s:8,20s:4", "1s:2:3:4"} {
		if err := new(stepList).Set(bad); err == nil {
			t.Errorf("Set(%q) = nil; want an error", bad)
		}
	}
}

func TestRateLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{RequestsPerMinute: 2, InputTokensPerMinute: 10_000, OutputTokensPerMinute: 100_000})
		defer s.Close()
		w := call(s, "POST", "/v1/messages", helloBody)
		if got := w.Header().Get("anthropic-ratelimit-requests-remaining"); got != "1" {
			t.Errorf("requests-remaining after 1 of 2: %q", got)
		}
		if got := w.Header().Get("anthropic-ratelimit-requests-limit"); got != "2" {
			t.Errorf("requests-limit %q", got)
		}
		wantReset := time.Now().Add(30 * time.Second).UTC().Format(time.RFC3339)
		if got := w.Header().Get("anthropic-ratelimit-requests-reset"); got != wantReset {
			t.Errorf("requests-reset %q; want %q (one request refills in 30s)", got, wantReset)
		}
		if got := w.Header().Get("anthropic-ratelimit-input-tokens-remaining"); got != "10000" {
			t.Errorf("input-tokens-remaining %q; want 10000 (a few tokens used, rounded to thousands)", got)
		}
		call(s, "POST", "/v1/messages", helloBody)
		w = call(s, "POST", "/v1/messages", helloBody)
		wantError(t, w, 429, "rate_limit_error", "retry-after")
		if got := w.Header().Get("retry-after"); got != "30" {
			t.Errorf("retry-after %q; want 30", got)
		}
		if got := w.Header().Get("anthropic-ratelimit-requests-remaining"); got != "0" {
			t.Errorf("requests-remaining when limited: %q", got)
		}
		time.Sleep(29 * time.Second)
		if w := call(s, "POST", "/v1/messages", helloBody); w.Code != 429 {
			t.Errorf("after 29s: %d; want still 429", w.Code)
		}
		time.Sleep(time.Second)
		if w := call(s, "POST", "/v1/messages", helloBody); w.Code != 200 {
			t.Errorf("after 30s: %d; want 200", w.Code)
		}

		// A prompt larger than the rest of the input bucket waits for it.
		big := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 36_000) + `"}]}`
		time.Sleep(time.Minute)
		if w := call(s, "POST", "/v1/messages", big); w.Code != 200 || w.Header().Get("anthropic-ratelimit-input-tokens-remaining") != "1000" {
			t.Errorf("9000-token prompt: %d remaining %q; want 200 and 1000", w.Code, w.Header().Get("anthropic-ratelimit-input-tokens-remaining"))
		}
		w = call(s, "POST", "/v1/messages", big)
		// 8000 more tokens at 10000/min: 48s.
		if w.Code != 429 || w.Header().Get("retry-after") != "48" {
			t.Errorf("second big prompt: %d retry-after %q; want 429 after 48", w.Code, w.Header().Get("retry-after"))
		}
	})
}

// The output-token limit is debited max_tokens at the start and given
// back what was not used at the end, as the API documents it: two answers
// of 10 tokens with max_tokens 800 fit one after the other in a limit of
// 1,000, though both would not fit side by side.
func TestOutputLimitCountsMaxTokensUntilTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{OutputTokensPerMinute: 1000})
		defer s.Close()
		body := `{"model":"m","max_tokens":800,"messages":[{"role":"user","content":"hi"}]}`
		w := call(s, "POST", "/v1/messages", body, "x-sim-output-tokens", "10")
		if w.Code != 200 {
			t.Fatalf("first: %d", w.Code)
		}
		if got := w.Header().Get("anthropic-ratelimit-output-tokens-remaining"); got != "0" {
			t.Errorf("output remaining during the first answer %q; want 0 (200 left, rounded): max_tokens is held", got)
		}
		if w := call(s, "POST", "/v1/messages", body, "x-sim-output-tokens", "10"); w.Code != 200 {
			t.Errorf("second, after the first ended: %d; want 200 (790 given back)", w.Code)
		}
	})
}

// Each API key has buckets of its own: one key's spent limit refuses none
// of another key's requests.
func TestRateLimitsArePerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{RequestsPerMinute: 1})
		defer s.Close()
		if w := call(s, "POST", "/v1/messages", helloBody); w.Code != 200 {
			t.Fatalf("first: %d", w.Code)
		}
		if w := call(s, "POST", "/v1/messages", helloBody); w.Code != 429 {
			t.Errorf("second on the same key: %d; want 429", w.Code)
		}
		if w := call(s, "POST", "/v1/messages", helloBody, "x-api-key", "sk-other"); w.Code != 200 {
			t.Errorf("first on another key: %d; want 200", w.Code)
		}
		s.Reset()
		if w := call(s, "POST", "/v1/messages", helloBody); w.Code != 200 {
			t.Errorf("after a reset: %d; want 200", w.Code)
		}
	})
}

// cachedBody has a system prompt of about 1500 tokens with a breakpoint.
func cachedBody(ttl, question string) string {
	cc := `{"type":"ephemeral"}`
	if ttl != "" {
		cc = `{"type":"ephemeral","ttl":"` + ttl + `"}`
	}
	return `{"model":"claude-sonnet-4-5","max_tokens":50,"system":[{"type":"text","text":"` + strings.Repeat("rule ", 1200) +
		`","cache_control":` + cc + `}],"messages":[{"role":"user","content":"` + question + `"}]}`
}

func TestPromptCacheConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{TTFT: time.Second})
		defer s.Close()
		var first, second decoded
		var wg sync.WaitGroup
		wg.Go(func() { first = decode(t, call(s, "POST", "/v1/messages", cachedBody("", "a"))) })
		time.Sleep(500 * time.Millisecond) // before the first response began
		wg.Go(func() { second = decode(t, call(s, "POST", "/v1/messages", cachedBody("", "b"))) })
		wg.Wait()
		third := decode(t, call(s, "POST", "/v1/messages", cachedBody("", "c")))

		const prefix = 1500 // 6000 characters of system prompt
		for name, d := range map[string]decoded{"first": first, "second (before first began)": second} {
			if d.Usage.CacheCreation != prefix || d.Usage.CacheRead != 0 || d.Usage.Split.M5 != prefix {
				t.Errorf("%s: usage %+v; want a %d-token 5m cache write", name, d.Usage, prefix)
			}
		}
		if third.Usage.CacheRead != prefix || third.Usage.CacheCreation != 0 || third.Usage.InputTokens != 1 {
			t.Errorf("third (after): usage %+v; want a %d-token read and 1 uncached", third.Usage, prefix)
		}
		// The entry lasts 5 minutes from its last use.
		time.Sleep(4 * time.Minute)
		if d := decode(t, call(s, "POST", "/v1/messages", cachedBody("", "d"))); d.Usage.CacheRead != prefix {
			t.Errorf("after 4m: %+v; want a read (TTL refreshed by the hit)", d.Usage)
		}
		time.Sleep(5*time.Minute + time.Second)
		if d := decode(t, call(s, "POST", "/v1/messages", cachedBody("", "e"))); d.Usage.CacheRead != 0 || d.Usage.CacheCreation != prefix {
			t.Errorf("after expiry: %+v; want a fresh write", d.Usage)
		}
		st := s.Stats()
		if st.Tokens.CacheRead != 2*prefix || st.Tokens.CacheCreation != 3*prefix {
			t.Errorf("stats tokens %+v", st.Tokens)
		}
	})
}

func TestPromptCacheRules(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	d := decode(t, call(s, "POST", "/v1/messages", cachedBody("1h", "a")))
	if d.Usage.Split.H1 != 1500 || d.Usage.Split.M5 != 0 {
		t.Errorf("1h write: %+v", d.Usage)
	}
	// Below the minimum cacheable length nothing is cached.
	small := `{"model":"claude-sonnet-4-5","max_tokens":50,"cache_control":{"type":"ephemeral"},"messages":[{"role":"user","content":"short"}]}`
	for range 2 {
		if d := decode(t, call(s, "POST", "/v1/messages", small)); d.Usage.CacheCreation != 0 || d.Usage.CacheRead != 0 {
			t.Errorf("short prompt: %+v; want no caching", d.Usage)
		}
	}
	// Haiku needs 4096 tokens (Haiku 4.5): 1500 is not enough.
	haiku := strings.Replace(cachedBody("", "a"), "claude-sonnet-4-5", "claude-haiku-4-5", 1)
	if d := decode(t, call(s, "POST", "/v1/messages", haiku)); d.Usage.CacheCreation != 0 {
		t.Errorf("haiku 1500 tokens: %+v; want no caching", d.Usage)
	}
	// Top-level cache_control caches up to the last block; the model is part of the key.
	auto := `{"model":"claude-opus-4-1","max_tokens":50,"cache_control":{"type":"ephemeral"},"messages":[{"role":"user","content":"` + strings.Repeat("word ", 1000) + `"}]}`
	a1, a2 := decode(t, call(s, "POST", "/v1/messages", auto)), decode(t, call(s, "POST", "/v1/messages", auto))
	if a1.Usage.CacheCreation != 1250 || a2.Usage.CacheRead != 1250 || a2.Usage.InputTokens != 0 {
		t.Errorf("automatic caching: %+v then %+v", a1.Usage, a2.Usage)
	}
	if w := call(s, "POST", "/v1/messages/count_tokens", auto); !strings.Contains(w.Body.String(), `"input_tokens":`+strconv.Itoa(1250)) {
		t.Errorf("count_tokens %s; want the whole prompt, 1250", w.Body)
	}
}

// Prefill grows with the input tokens not read from the cache: a request
// that reads a cached prefix has its first token sooner, by the prefill
// time of the prefix.
func TestPrefillShortenedByCacheRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const base, per = 100 * time.Millisecond, 100 * time.Microsecond
		s := New(Config{TTFT: base, PrefillPerToken: per})
		defer s.Close()
		system := strings.Repeat("abcd", 8000) // 8,000 tokens by the four-characters rule
		body := `{"model":"claude-sonnet-4-5","max_tokens":8,` +
			`"system":[{"type":"text","text":"` + system + `","cache_control":{"type":"ephemeral"}}],` +
			`"messages":[{"role":"user","content":"hello"}]}`
		first := call(s, "POST", "/v1/messages", body, "x-sim-output-tokens", "1")
		u := decode(t, first).Usage
		if u.CacheCreation < 8000 || u.CacheRead != 0 {
			t.Fatalf("first usage %+v; want a write of the 8,000-token system prompt", u)
		}
		d, _ := timed(s, body, "x-sim-output-tokens", "1")
		uncached := u.InputTokens // the same prompt again: only the part after the breakpoint
		if want := base + time.Duration(uncached)*per; d != want {
			t.Errorf("cache read took %v; want %v (TTFT plus %d uncached tokens)", d, want, uncached)
		}
		start := time.Now()
		call(s, "POST", "/v1/messages", strings.Replace(body, "abcd", "abce", 1), "x-sim-output-tokens", "1")
		if d, want := time.Since(start), base+time.Duration(u.InputTokens+u.CacheCreation)*per; d != want {
			t.Errorf("another prefix took %v; want %v (TTFT plus the whole prompt's prefill)", d, want)
		}
	})
}

// InputTokenBucket reads the most spent credential's input-token bucket,
// refilled to now, without taking from it.
func TestInputTokenBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if _, _, ok := New(Config{}).InputTokenBucket(); ok {
			t.Error("no input-token limit: ok; want false")
		}
		s := New(Config{InputTokensPerMinute: 12_000})
		defer s.Close()
		if level, size, ok := s.InputTokenBucket(); !ok || size != 12_000 || level != 12_000 {
			t.Errorf("before any request: %v of %d (ok %v); want a full 12000", level, size, ok)
		}
		big := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 24_000) + `"}]}`
		if w := call(s, "POST", "/v1/messages", big); w.Code != 200 {
			t.Fatalf("first: %d", w.Code)
		}
		call(s, "POST", "/v1/messages", helloBody, "x-api-key", "sk-other") // a few tokens on another key
		level, _, _ := s.InputTokenBucket()
		if level > 6_500 || level < 5_500 {
			t.Errorf("after a ~6000-token prompt: level %v; want about 6000 (the spent key's, not the other's)", level)
		}
		time.Sleep(15 * time.Second) // 12000/min: 3000 back
		again, _, _ := s.InputTokenBucket()
		if d := again - level; d < 2_999 || d > 3_001 {
			t.Errorf("15 s later: level %v, %v more; want 3000 more", again, d)
		}
		if twice, _, _ := s.InputTokenBucket(); twice != again {
			t.Errorf("read twice at once: %v then %v; want the same (reading takes nothing)", again, twice)
		}
	})
}

// Each API key has a prompt cache of its own, as each organisation has on
// the API: a prefix written with one key is written again with another,
// and read only with the key that wrote it.
func TestPromptCacheIsPerKey(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	const prefix = 1500
	usage := func(key, question string) string {
		d := decode(t, call(s, "POST", "/v1/messages", cachedBody("", question), "x-api-key", key))
		return fmt.Sprintf("write %d read %d", d.Usage.CacheCreation, d.Usage.CacheRead)
	}
	write, read := fmt.Sprintf("write %d read 0", prefix), fmt.Sprintf("write 0 read %d", prefix)
	for _, c := range []struct{ key, want string }{
		{"sk-a", write}, {"sk-b", write}, {"sk-a", read}, {"sk-b", read},
	} {
		if got := usage(c.key, "q"); got != c.want {
			t.Errorf("%s: %s; want %s", c.key, got, c.want)
		}
	}
	s.Reset()
	if got := usage("sk-a", "q"); got != write {
		t.Errorf("after a reset: %s; want %s", got, write)
	}
}
