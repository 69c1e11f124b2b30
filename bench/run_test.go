package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/request"
)

func mustParse(t *testing.T, js string) *Scenario {
	t.Helper()
	sc, err := ParseScenario([]byte(js), "test.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestRunEndToEnd runs a small burst through all three modes and checks
// the report's invariants and the files it writes.
func TestRunEndToEnd(t *testing.T) {
	sc := mustParse(t, `{"name":"e2e","seed":7,
		"sim":{"ttft":"20ms","per_token":"1ms","capacity":4},
		"sluice":{"max_concurrency":2,"max_wait":"5ms","max_size":4},
		"client":{"timeout":"10s"},
		"workload":{"kind":"burst","n":12,"stream_fraction":0.5,"prompt_tokens":[10,50],"output_tokens":[4,12]}}`)
	rep, err := Run(context.Background(), Options{Scenario: sc, Modes: []string{ModeDirect, ModePlain, ModeWindowed}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Modes) != 3 {
		t.Fatalf("%d modes in the report; want 3", len(rep.Modes))
	}
	for _, m := range rep.Modes {
		if m.Sent != 12 || m.Lost != 0 || m.Succeeded+m.Failed != m.Sent {
			t.Errorf("%s: sent %d, succeeded %d, failed %d, lost %d (%v); want 12 sent, none lost",
				m.Mode, m.Sent, m.Succeeded, m.Failed, m.Lost, m.Errors)
		}
		if m.LatencyMS.N != m.Succeeded || m.LatencyMS.P50 > m.LatencyMS.P99 || m.LatencyMS.P99 > m.LatencyMS.Max {
			t.Errorf("%s: latency summary %+v inconsistent", m.Mode, m.LatencyMS)
		}
		if m.Tokens.Output == 0 || m.CostUSD <= 0 {
			t.Errorf("%s: tokens %+v, cost %v; want the sim's counts", m.Mode, m.Tokens, m.CostUSD)
		}
	}
	w := rep.Mode(ModeWindowed)
	// The simulator's exact counter may see cap+1 for the microseconds
	// between sluice reading a reply's last byte (and giving its slot to
	// the next call) and the simulator's handler returning, and a 10 ms
	// sample may land in them (see checkInvariants); the gate may not
	// exceed the cap at all.
	if w.PeakGateInflight > 2 || w.PeakUpstreamSampled > 3 {
		t.Errorf("windowed peak gate %d, sampled upstream %d; want <= cap 2, and one more for the sample", w.PeakGateInflight, w.PeakUpstreamSampled)
	}
	for _, res := range rep.Results() {
		if res.Mode == ModeWindowed {
			for _, s := range res.Samples {
				if s.UpstreamInflight > 3 || s.GateInflight > 2 { // one more upstream, as above
					t.Fatalf("windowed sample %+v over the cap", s)
				}
			}
		}
	}

	dir := t.TempDir()
	if err := rep.WriteFiles(dir, nil); err != nil { // the charts: bench/plots' TestWriteDrawsTheCharts
		t.Fatal(err)
	}
	var back struct {
		Modes []struct {
			Mode                 string `json:"mode"`
			Sent, Succeeded      int
			Lost                 int                `json:"lost"`
			GoodputRPS           float64            `json:"goodput_rps"`
			LatencyMS            map[string]float64 `json:"latency_ms"`
			PeakUpstreamInflight *int               `json:"peak_upstream_inflight"`
			Errors               map[string]int     `json:"errors"`
			Tokens               map[string]int     `json:"tokens"`
			CostUSD              *float64           `json:"cost_usd"`
		} `json:"modes"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, m := range back.Modes {
		for _, k := range []string{"p50", "p90", "p99", "max"} {
			if _, ok := m.LatencyMS[k]; !ok {
				t.Errorf("report.json %s: latency_ms.%s missing", m.Mode, k)
			}
		}
		if m.PeakUpstreamInflight == nil || m.CostUSD == nil || m.Errors == nil || m.Tokens == nil || m.GoodputRPS <= 0 {
			t.Errorf("report.json %s: a required field is missing: %s", m.Mode, b)
		}
	}

	// Every request appears in the trace exactly once per mode.
	f, err := os.Open(filepath.Join(dir, "trace.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]map[int]int{}
	sc2 := bufio.NewScanner(f)
	for sc2.Scan() {
		var r Record
		if err := json.Unmarshal(sc2.Bytes(), &r); err != nil {
			t.Fatalf("trace line %q: %v", sc2.Text(), err)
		}
		if seen[r.Mode] == nil {
			seen[r.Mode] = map[int]int{}
		}
		seen[r.Mode][r.ID]++
		if r.Outcome == "ok" && (r.SlotMS == nil || r.FirstByteMS == nil || *r.SlotMS < r.ArrivalMS || r.DoneMS < *r.FirstByteMS) {
			t.Errorf("trace %s/%d: times out of order: %s", r.Mode, r.ID, sc2.Text())
		}
	}
	for _, mode := range []string{ModeDirect, ModePlain, ModeWindowed} {
		if len(seen[mode]) != 12 {
			t.Errorf("trace has %d requests of %s; want 12", len(seen[mode]), mode)
		}
		for id, n := range seen[mode] {
			if n != 1 {
				t.Errorf("trace: %s request %d appears %d times", mode, id, n)
			}
		}
	}
	for _, name := range []string{"report.json", "trace.jsonl", "series.json"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "inflight.svg")); err == nil {
		t.Error("inflight.svg written without a Plot")
	}
}

// TestLittlesLawOnSteadyRun: on a steady open-loop run the upstream's mean
// in-flight equals its throughput times its mean service time (L = λW),
// within 5 %, over a window that leaves out warm-up and drain.
func TestLittlesLawOnSteadyRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 3 s")
	}
	sc := mustParse(t, `{"seed":3,"sim":{"ttft":"80ms","per_token":"2ms"},
		"workload":{"kind":"poisson","rate":60,"duration":"3s","output_tokens":[8,24],"prompt_tokens":[10,100]}}`)
	rep, err := Run(context.Background(), Options{Scenario: sc, Modes: []string{ModeDirect}})
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Modes[0].Little
	if l == nil {
		t.Fatal("no Little's Law figures")
	}
	if math.Abs(l.RatioLToLambdaW-1) > 0.05 {
		t.Fatalf("L = %.2f, λW = %.2f/s × %.1fms = %.2f: ratio %.3f, want within 5%% of 1",
			l.MeanInflight, l.ThroughputRPS, l.MeanServiceMS, l.LambdaTimesW, l.RatioLToLambdaW)
	}
	t.Logf("L = %.2f, λ = %.1f/s, W = %.1f ms, λW = %.2f", l.MeanInflight, l.ThroughputRPS, l.MeanServiceMS, l.LambdaTimesW)
}

func TestRunRejectsUnknownMode(t *testing.T) {
	sc := mustParse(t, `{"workload":{"kind":"burst","n":1}}`)
	if _, err := Run(context.Background(), Options{Scenario: sc, Modes: []string{"turbo"}}); err == nil {
		t.Fatal("mode turbo accepted")
	}
}

// A burst sharing a cached system prompt: on the plain path every request
// writes it; windowed, with CACHE_AWARE, one writes it and the others read
// it, and the report says so per request and in its input cost. The
// upstream's 300 ms to first token is what makes the plain path's six a
// simultaneous cold fan-out however late a loaded machine starts the
// last of them: a cache entry is readable once a response has begun.
func TestSharedPrefixRun(t *testing.T) {
	sc := mustParse(t, `{"name":"shared","seed":3,
		"sim":{"ttft":"300ms","per_token":"1ms","prefill_per_token":"10µs"},
		"sluice":{"max_wait":"5ms"},
		"workload":{"kind":"burst","n":6,"stream_fraction":1,"shared_prefix_tokens":2000,
		            "prompt_tokens":[10,20],"output_tokens":[4,8]}}`)
	rep, err := Run(context.Background(), Options{Scenario: sc, Modes: []string{ModePlain, ModeWindowed}})
	if err != nil {
		t.Fatal(err)
	}
	plain, windowed := rep.Mode(ModePlain), rep.Mode(ModeWindowed)
	if plain.TTFTWriteMS.N != 6 || plain.TTFTReadMS.N != 0 {
		t.Errorf("plain: %d streams wrote the cache, %d read it; want 6, 0", plain.TTFTWriteMS.N, plain.TTFTReadMS.N)
	}
	if windowed.TTFTWriteMS.N != 1 || windowed.TTFTReadMS.N != 5 {
		t.Errorf("windowed: %d streams wrote the cache, %d read it; want 1, 5", windowed.TTFTWriteMS.N, windowed.TTFTReadMS.N)
	}
	if w := windowed.Tokens; w.CacheCreation*5 != w.CacheRead || w.CacheCreation < 2000 {
		t.Errorf("windowed cache tokens %+v; want one write of the prefix and five reads", w)
	}
	if !(windowed.InputCostUSD > 0 && windowed.InputCostUSD < plain.InputCostUSD/3) {
		t.Errorf("input cost windowed $%g, plain $%g; want windowed far below", windowed.InputCostUSD, plain.InputCostUSD)
	}
}

// Sessions of several turns: each turn is sent once the one before has
// ended, repeats the session's earlier messages, and is recorded as a
// request of its own.
func TestSessionsRun(t *testing.T) {
	sc := mustParse(t, `{"name":"sessions","seed":5,
		"sim":{"ttft":"20ms","per_token":"1ms"},
		"sluice":{"max_wait":"5ms"},
		"workload":{"kind":"burst","n":3,"duration":"30ms","turns":3,"stream_fraction":1,"shared_prefix_tokens":2000,
		            "prompt_tokens":[10,20],"output_tokens":[4,8]}}`)
	as, err := sc.Arrivals()
	if err != nil || len(as) != 9 {
		t.Fatalf("%d arrivals, %v; want 3 sessions of 3 turns", len(as), err)
	}
	if as[3].At != 10*time.Millisecond || as[3].Session != 1 || as[3].Turn != 0 || as[5].Turn != 2 {
		t.Errorf("arrivals %+v; want sessions spread 10 ms apart, their turns in order", as)
	}
	rep, err := Run(context.Background(), Options{Scenario: sc, Modes: []string{ModeWindowed}})
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Results()[0]
	if m := rep.Modes[0]; m.Sent != 9 || m.Succeeded != 9 {
		t.Fatalf("sent %d, succeeded %d; want 9", m.Sent, m.Succeeded)
	}
	for i, r := range res.Records {
		if r.Turn > 0 {
			if prev := res.Records[i-1]; r.ArrivalMS < prev.DoneMS {
				t.Errorf("session %d turn %d sent at %.1f ms, before turn %d ended at %.1f ms", r.Session, r.Turn, r.ArrivalMS, prev.Turn, prev.DoneMS)
			}
		}
	}
	// Turn 0 of the first session writes the shared prompt; everyone else
	// reads it.
	if m := rep.Modes[0]; m.TTFTReadMS.N != 8 {
		t.Errorf("%d streams read the cache; want 8", m.TTFTReadMS.N)
	}
	body := string(requestBody("m", "", nil, 0, as[2]))
	for _, want := range []string{`session 0 turn 0`, `Done with turn 1.`, `session 0 turn 2`, `"cache_control":{"type":"ephemeral"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("turn 2's body lacks %s: %s", want, body)
		}
	}
}

// With Repeat, every mode runs once per seed, each run's figures are in
// the report, and the table gives medians and ranges.
func TestRunRepeat(t *testing.T) {
	sc := mustParse(t, `{"name":"rep","seed":7,
		"sim":{"ttft":"20ms","per_token":"1ms","jitter":0.3,"capacity":4},
		"sluice":{"max_concurrency":2,"max_wait":"5ms","max_size":4},
		"workload":{"kind":"poisson","rate":200,"duration":"60ms","prompt_tokens":[10,50],"output_tokens":[4,12]}}`)
	rep, err := Run(context.Background(), Options{Scenario: sc, Repeat: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Repeats) != 3 {
		t.Fatalf("%d repeats; want 3", len(rep.Repeats))
	}
	for i, rr := range rep.Repeats {
		if rr.Seed != 7+int64(i) || len(rr.Modes) != 2 {
			t.Errorf("repeat %d: seed %d, %d modes; want seed %d, 2 modes", i, rr.Seed, len(rr.Modes), 7+i)
		}
	}
	if rep.Repeats[0].Modes[0].Sent != rep.Modes[0].Sent {
		t.Errorf("the first repeat is not the report's own run")
	}
	for _, mode := range []string{ModePlain, ModeWindowed} {
		g, ok := rep.Summary[mode]["goodput_rps"]
		var vs []float64
		for _, rr := range rep.Repeats {
			for _, m := range rr.Modes {
				if m.Mode == mode {
					vs = append(vs, m.GoodputRPS)
				}
			}
		}
		if med, lo, hi := spread(vs); !ok || g != (Spread{Median: med, Min: lo, Max: hi}) {
			t.Errorf("%s: summary goodput %+v; want the spread of %v", mode, g, vs)
		}
	}
	var b strings.Builder
	rep.WriteTable(&b)
	out := b.String()
	if !strings.Contains(out, "3 runs, seeds 7 to 9") || !strings.Contains(out, "medians of 3 runs") {
		t.Errorf("table does not say it shows medians of 3 runs:\n%s", out)
	}
	if !strings.Contains(out, " .. ") {
		t.Errorf("no range in the table of 3 seeds' runs:\n%s", out)
	}
}

// The agent fleet's shared prefix is a dozen tools and a system prompt,
// cached by the system prompt's breakpoint: one prefix of about the
// scenario's shared_prefix_tokens, the tools in it.
func TestAgentFleetPrefixCarriesToolsAndSystem(t *testing.T) {
	sc, err := LoadScenario("agent-fleet")
	if err != nil {
		t.Fatal(err)
	}
	w := sc.Workload
	if w.SharedTools == 0 {
		t.Fatal("agent-fleet has no shared tools")
	}
	as, err := sc.Arrivals()
	if err != nil {
		t.Fatal(err)
	}
	body := requestBody("claude-sonnet-4-5", sharedPrefix(w.SharedPrefixTokens-w.SharedTools*toolTokens), sharedTools(w.SharedTools), 0, as[0])
	d, err := request.Parse(body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Prefixes) == 0 {
		t.Fatal("no cacheable prefix")
	}
	got := d.Prefixes[0].Tokens
	if got < w.SharedPrefixTokens*9/10 || got > w.SharedPrefixTokens*11/10 {
		t.Errorf("shared prefix of %d tokens; want about %d", got, w.SharedPrefixTokens)
	}
	var v struct {
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &v); err != nil || len(v.Tools) != w.SharedTools {
		t.Errorf("%d tools in the body (%v); want %d", len(v.Tools), err, w.SharedTools)
	}
	// A changed tool is another prefix.
	other := sharedTools(w.SharedTools)
	other[3]["description"] = "changed"
	d2, _ := request.Parse(requestBody("claude-sonnet-4-5", sharedPrefix(w.SharedPrefixTokens-w.SharedTools*toolTokens), other, 0, as[0]), nil)
	if d2.Prefixes[0].Key == d.Prefixes[0].Key {
		t.Error("a changed tool definition kept the prefix's key")
	}
}

// A run against a simulator with an input-token limit samples its bucket:
// full before the first request, drawn down by the prompts, never above
// its size, and written to series.json with the size.
func TestRunSamplesTheInputBucket(t *testing.T) {
	sc := mustParse(t, `{"name":"bucket","seed":3,
		"sim":{"ttft":"20ms","per_token":"1ms","input_tokens_per_minute":60000},
		"client":{"timeout":"10s","max_retries":0},
		"workload":{"kind":"burst","n":8,"prompt_tokens":[2000,3000],"output_tokens":[4,8]}}`)
	rep, err := Run(context.Background(), Options{Scenario: sc, Modes: []string{ModePlain}})
	if err != nil {
		t.Fatal(err)
	}
	res := rep.Results()[0]
	if res.InputBucketSize != 60000 || len(res.Samples) == 0 {
		t.Fatalf("bucket size %d, %d samples; want 60000 and some", res.InputBucketSize, len(res.Samples))
	}
	low := math.Inf(1)
	for _, s := range res.Samples {
		if s.InputBucket < 0 || s.InputBucket > 60000 {
			t.Fatalf("sample %+v: bucket outside [0, 60000]", s)
		}
		low = min(low, s.InputBucket)
	}
	if low > 60000-8*2000 {
		t.Errorf("lowest sampled level %v; want at most %d after 8 prompts of 2000+ tokens", low, 60000-8*2000)
	}
	dir := t.TempDir()
	if err := rep.writeSeries(filepath.Join(dir, "series.json")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "series.json"))
	if err != nil {
		t.Fatal(err)
	}
	var series []seriesJSON
	if err := json.Unmarshal(b, &series); err != nil {
		t.Fatal(err)
	}
	if s := series[0]; s.InputBucketSize != 60000 || len(s.InputBucket) != len(s.TMS) {
		t.Errorf("series.json: bucket size %d, %d levels for %d times; want 60000, one level a time", s.InputBucketSize, len(s.InputBucket), len(s.TMS))
	}
}
