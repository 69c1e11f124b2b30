package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sim"
)

// fleetCapture is what the bench reads of a captured multi-turn fleet run
// (testdata/clients/fleet, written by clients' TestClaudeCodeFleetTurns).
type fleetCapture struct {
	Arrival  string `json:"arrival"`
	Front    []fleetExchange
	Upstream []fleetExchange
}

type fleetExchange struct {
	Session string        `json:"session"`
	Turn    int           `json:"turn"`
	At      time.Duration `json:"at"`
	Usage   struct {
		Input         int `json:"input_tokens"`
		CacheCreation int `json:"cache_creation_input_tokens"`
		CacheRead     int `json:"cache_read_input_tokens"`
		Output        int `json:"output_tokens"`
	} `json:"usage"`
}

func (e fleetExchange) total() int { return e.Usage.Input + e.Usage.CacheCreation + e.Usage.CacheRead }

// capturedFleet is the figures the claude-code-fleet scenario is built
// from, read from the captures.
type capturedFleet struct {
	agents     int
	spread     time.Duration // the together runs' first requests, first to last at sluice's door
	shared     int           // median cache read of a first turn that read (the tools and identity line)
	own        int           // median cache write of such a turn (the agent's main prompt, reminder, task, environment)
	uncached   int           // median uncached input of a request (the attribution line)
	firstTotal int           // median input of a first turn, cached or not
	addedMin   int           // tokens a later turn adds to the one before, per agent: min, max, mean
	addedMax   int
	addedMean  float64
	outputMean float64
	requests   int
}

func readFleetCaptures(t *testing.T) capturedFleet {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "testdata", "clients", "fleet", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in testdata/clients/fleet (%v)", err)
	}
	var c capturedFleet
	var shared, own, uncached, first, added, outputs []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var run fleetCapture
		if err := json.Unmarshal(b, &run); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		totals := map[string]map[int]int{}
		var firstAt []time.Duration
		for _, e := range run.Front {
			if e.Turn == 0 {
				firstAt = append(firstAt, e.At)
			}
		}
		if run.Arrival == "together" && len(firstAt) > 0 {
			c.spread = max(c.spread, slices.Max(firstAt)-slices.Min(firstAt))
		}
		for _, e := range run.Upstream {
			c.requests++
			if totals[e.Session] == nil {
				totals[e.Session] = map[int]int{}
			}
			totals[e.Session][e.Turn] = e.total()
			uncached = append(uncached, e.Usage.Input)
			outputs = append(outputs, e.Usage.Output)
			if e.Turn == 0 {
				first = append(first, e.total())
				if e.Usage.CacheRead > 0 {
					shared, own = append(shared, e.Usage.CacheRead), append(own, e.Usage.CacheCreation)
				}
			}
		}
		c.agents = max(c.agents, len(totals))
		for _, turns := range totals {
			for k := 1; k < len(turns); k++ {
				added = append(added, turns[k]-turns[k-1])
			}
		}
	}
	c.shared, c.own, c.uncached, c.firstTotal = median(shared), median(own), median(uncached), median(first)
	c.addedMin, c.addedMax, c.addedMean = slices.Min(added), slices.Max(added), mean(added)
	c.outputMean = mean(outputs)
	return c
}

func median(v []int) int {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}

func mean(v []int) float64 {
	sum := 0
	for _, x := range v {
		sum += x
	}
	return float64(sum) / float64(len(v))
}

func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

// The claude-code-fleet scenario is rebuilt from the captured multi-turn
// fleet (testdata/clients/fleet): its requests, sent to the simulator one
// agent after another and turn by turn, are billed as the captured
// fleet's were. Agents and arrival: as many agents as captured, their
// first requests no further apart than the together runs' at sluice's
// door. First turns: the shared prefix read by every agent after the
// first and each agent's own write within 3 % of the captures' medians,
// the uncached attribution line within 2 tokens, the whole first turn
// within 5 %. Later turns: what each adds to the one before (tool call
// and result) within the captured range widened by 20 %, its mean within
// 15 %. Replies: the mean output (text and thinking) within 15 % of the
// captured mean.
// The captured figures are read from the files, so new captures or a
// changed shape make this fail until the two agree again.
func TestClaudeCodeFleetMatchesCaptures(t *testing.T) {
	c := readFleetCaptures(t)
	t.Logf("captured: %d agents, %d requests, first requests within %v; shared %d, own %d, uncached %d, first turn %d; later turns add %d..%d (mean %.0f); output mean %.1f",
		c.agents, c.requests, c.spread, c.shared, c.own, c.uncached, c.firstTotal, c.addedMin, c.addedMax, c.addedMean, c.outputMean)

	sc, err := LoadScenario("claude-code-fleet")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Workload.N != c.agents {
		t.Errorf("scenario has %d agents; the captures %d", sc.Workload.N, c.agents)
	}
	as, err := sc.Arrivals()
	if err != nil {
		t.Fatal(err)
	}
	var last time.Duration
	for _, a := range as {
		last = max(last, a.At)
	}
	if last > c.spread {
		t.Errorf("the scenario's agents start within %v; the captured together runs' within %v", last, c.spread)
	}

	// The scenario's simulator, without its delays.
	cfg := sc.SimConfig()
	cfg.TTFT, cfg.PerToken, cfg.PrefillPerToken, cfg.Jitter = time.Nanosecond, 0, 0, 0
	srv := httptest.NewServer(sim.New(cfg))
	defer srv.Close()
	shape := newClaudeCodeShape(sc.Seed, sc.Workload.PromptTokens)
	totals := map[int]map[int]int{}
	var outputs []int
	// One agent after another, each turn once its previous has ended: the
	// order of the captures' staggered runs (and of the together runs'
	// windowed first turns: one writes, the others read).
	idx := make([]int, len(as))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(x, y int) int { return as[x].Turn - as[y].Turn })
	for _, i := range idx {
		a := as[i]
		a.Stream = false
		body := shape.body(sc.Workload.Model, i, a)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", bytes.NewReader(body))
		req.Header.Set("x-api-key", "sk-bench-capture")
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("content-type", "application/json")
		req.Header.Set("X-Sim-Output-Tokens", strconv.Itoa(a.OutputTokens)) // as the bench's client
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Usage struct {
				Input         int `json:"input_tokens"`
				CacheCreation int `json:"cache_creation_input_tokens"`
				CacheRead     int `json:"cache_read_input_tokens"`
				Output        int `json:"output_tokens"`
			} `json:"usage"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("agent %d turn %d: status %d, %v", a.Session, a.Turn, resp.StatusCode, err)
		}
		u := v.Usage
		outputs = append(outputs, u.Output)
		total := u.Input + u.CacheCreation + u.CacheRead
		if totals[a.Session] == nil {
			totals[a.Session] = map[int]int{}
		}
		totals[a.Session][a.Turn] = total
		if d := u.Input - c.uncached; d < -2 || d > 2 {
			t.Errorf("agent %d turn %d: %d uncached input tokens; captured %d", a.Session, a.Turn, u.Input, c.uncached)
		}
		if a.Turn != 0 {
			continue
		}
		if !within(float64(total), float64(c.firstTotal), 0.05) {
			t.Errorf("agent %d: first turn of %d tokens; captured %d (5 %%)", a.Session, total, c.firstTotal)
		}
		if a.Session == 0 {
			continue
		}
		if !within(float64(u.CacheRead), float64(c.shared), 0.03) || !within(float64(u.CacheCreation), float64(c.own), 0.03) {
			t.Errorf("agent %d's first turn reads %d and writes %d; captured %d and %d (3 %%)", a.Session, u.CacheRead, u.CacheCreation, c.shared, c.own)
		}
	}
	if m := mean(outputs); !within(m, c.outputMean, 0.15) {
		t.Errorf("mean output tokens %.1f; captured %.1f (15 %%)", m, c.outputMean)
	}
	var added []int
	for s, turns := range totals {
		for k := 1; k < len(turns); k++ {
			d := turns[k] - turns[k-1]
			added = append(added, d)
			if float64(d) < 0.8*float64(c.addedMin) || float64(d) > 1.2*float64(c.addedMax) {
				t.Errorf("agent %d turn %d adds %d tokens; captured %d to %d (20 %%)", s, k, d, c.addedMin, c.addedMax)
			}
		}
	}
	if m := mean(added); !within(m, c.addedMean, 0.15) {
		t.Errorf("later turns add %.0f tokens on average; captured %.0f (15 %%)", m, c.addedMean)
	}
	t.Logf("scenario: later turns add %d..%d (mean %.0f); output mean %.1f", slices.Min(added), slices.Max(added), mean(added), mean(outputs))
}
