package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// A variant is a windowed mode whose settings override the scenario's;
// its name must not clash with a mode's.
func TestVariants(t *testing.T) {
	sc, err := LoadScenario("capacity-shift")
	if err != nil {
		t.Fatal(err)
	}
	if !sc.Windowed("adaptive") || !sc.Windowed(ModeWindowed) || sc.Windowed(ModePlain) || sc.Windowed("nope") {
		t.Error("Windowed: want true for a variant and windowed only")
	}
	c := sc.ModeConfig("adaptive")
	if !c.Enabled || c.GateLimit != config.GateLimitAdaptive || c.MaxConcurrency != 64 || c.GateLimitFloor != 2 {
		t.Errorf("adaptive variant's config: enabled %v, limit %s, cap %d, floor %d", c.Enabled, c.GateLimit, c.MaxConcurrency, c.GateLimitFloor)
	}
	if c := sc.ModeConfig("static-8"); c.GateLimit != config.GateLimitStatic || c.MaxConcurrency != 8 {
		t.Errorf("static-8 variant's config: limit %s, cap %d", c.GateLimit, c.MaxConcurrency)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"workload":{"kind":"burst","n":1},"variants":[{"name":"plain"}]}`, `"plain" is taken`},
		{`{"workload":{"kind":"burst","n":1},"variants":[{"name":"a"},{"name":"a"}]}`, `"a" is taken`},
		{`{"workload":{"kind":"burst","n":1},"variants":[{"name":"a b"}]}`, `variants[0].name`},
		{`{"workload":{"kind":"burst","n":1},"variants":[{"name":"a","sluice":{"limit":"magic"}}]}`, `variants[0].sluice.limit`},
		{`{"sim":{"capacity_steps":[{"from":"2s"},{"from":"1s"}]},"workload":{"kind":"burst","n":1}}`, `capacity_steps[1].from`},
	} {
		_, err := ParseScenario([]byte(tc.json), "t", nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseScenario(%s) = %v; want an error naming %s", tc.json, err, tc.want)
		}
	}
	if _, err := Run(t.Context(), Options{Scenario: sc, Modes: []string{"static-9"}}); err == nil || !strings.Contains(err.Error(), "static-8") {
		t.Errorf("Run with an unknown mode = %v; want an error listing the variants", err)
	}
}

// Each phase counts the successes that ended in it for goodput, and the
// requests that arrived in it for latency and failures.
func TestPhaseReports(t *testing.T) {
	phases := []phase{{0, 32, 48}, {10 * time.Second, 8, 12}}
	res := &ModeResult{Windowed: true, Records: []Record{
		{ArrivalMS: 1000, DoneMS: 2000, Outcome: "ok"},
		{ArrivalMS: 9000, DoneMS: 12000, Outcome: "ok"}, // arrived in 1, ended in 2
		{ArrivalMS: 11000, DoneMS: 15000, Outcome: "error"},
		{ArrivalMS: 12000, DoneMS: 19000, Outcome: "ok"},
		{ArrivalMS: 20000, DoneMS: 30000, Outcome: "ok"}, // the last arrival: ends after the last phase
	}, Samples: []Sample{{T: time.Second, GateCapacity: 30}, {T: 2 * time.Second, GateCapacity: 34}, {T: 11 * time.Second, GateCapacity: 9}}}
	got := phaseReports(res, phases)
	if len(got) != 2 {
		t.Fatalf("%d phases; want 2", len(got))
	}
	p1, p2 := got[0], got[1]
	if p1.Arrived != 2 || p1.Succeeded != 2 || p1.GoodputRPS != 0.1 || p1.LatencyMS.P99 != 3000 || p1.MeanLimit != 32 {
		t.Errorf("phase 1: %+v; want 2 arrived and succeeded, goodput 0.1/s (1 ended in 10 s), p99 3000 ms, mean limit 32", p1)
	}
	if p2.ToS != 20 || p2.Arrived != 2 || p2.Failed != 1 || p2.GoodputRPS != 0.2 || p2.MeanLimit != 9 {
		t.Errorf("phase 2: %+v; want to 20 s (the last arrival), 2 arrived before it, 1 failed, goodput 0.2/s (2 ended in 10 s), mean limit 9", p2)
	}
}
