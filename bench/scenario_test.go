package bench

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func TestBuiltinScenariosParse(t *testing.T) {
	names := Builtin()
	for _, want := range []string{"burst", "light", "overload", "shared-prefix", "spike"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("built-in scenario %q missing from %v", want, names)
		}
	}
	for _, n := range names {
		sc, err := LoadScenario(n)
		if err != nil {
			t.Fatalf("LoadScenario(%q): %v", n, err)
		}
		as, err := sc.Arrivals()
		if err != nil || len(as) == 0 {
			t.Fatalf("%s: %d arrivals, %v", n, len(as), err)
		}
		// Short enough to run by hand: the last arrival within 30 s (the
		// ratelimited scenario needs its 30 s, for the bucket to refill
		// several times over).
		if last := as[len(as)-1].At; last > 30*time.Second {
			t.Errorf("%s: last arrival at %s; keep built-ins under 30 s", n, last)
		}
	}
}

func TestWorkloads(t *testing.T) {
	parse := func(js string, dir fstest.MapFS) *Scenario {
		t.Helper()
		sc, err := ParseScenario([]byte(js), "t.json", dir)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	arrivals := func(sc *Scenario) []Arrival {
		t.Helper()
		as, err := sc.Arrivals()
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	burst := arrivals(parse(`{"workload":{"kind":"burst","n":5,"stream_fraction":1,"prompt_tokens":[10,10],"output_tokens":[7,7]}}`, nil))
	if len(burst) != 5 || burst[4].At != 0 || !burst[0].Stream || burst[0].PromptTokens != 10 || burst[0].OutputTokens != 7 {
		t.Fatalf("burst = %+v", burst)
	}
	p := `{"seed":3,"workload":{"kind":"poisson","rate":100,"duration":"10s","stream_fraction":0.5}}`
	a, b := arrivals(parse(p, nil)), arrivals(parse(p, nil))
	if len(a) < 900 || len(a) > 1100 {
		t.Fatalf("poisson at 100/s for 10 s gave %d arrivals", len(a))
	}
	for i := range a {
		if !reflect.DeepEqual(a[i], b[i]) {
			t.Fatalf("same seed, different arrival %d: %+v vs %+v", i, a[i], b[i])
		}
	}
	steps := arrivals(parse(`{"workload":{"kind":"steps","steps":[{"duration":"5s","rate":0},{"duration":"5s","rate":50}]}}`, nil))
	if len(steps) == 0 || steps[0].At < 5*time.Second {
		t.Fatalf("steps: first arrival at %v; want none in the idle first step", steps[0].At)
	}
	ramp := arrivals(parse(`{"workload":{"kind":"ramp","from_rate":0,"rate":100,"duration":"10s"}}`, nil))
	early, late := 0, 0
	for _, x := range ramp {
		if x.At < 5*time.Second {
			early++
		} else {
			late++
		}
	}
	if late < 2*early {
		t.Fatalf("ramp 0→100/s: %d arrivals in the first half, %d in the second", early, late)
	}
	dir := fstest.MapFS{"arr.jsonl": {Data: []byte(
		`{"mode":"plain","arrival_ms":5,"stream":true,"output_tokens":9}` + "\n" +
			`{"mode":"windowed","arrival_ms":1}` + "\n" +
			`{"mode":"plain","arrival_ms":2.5}` + "\n")}}
	tr := arrivals(parse(`{"workload":{"kind":"trace","trace":"arr.jsonl"}}`, dir))
	if len(tr) != 2 || tr[0].At != 2500*time.Microsecond || tr[1].At != 5*time.Millisecond || !tr[1].Stream || tr[1].OutputTokens != 9 {
		t.Fatalf("trace replay = %+v; want the plain lines, sorted", tr)
	}
	bad := fstest.MapFS{"bad.jsonl": {Data: []byte(`{"stream":true}` + "\n")}}
	if _, err := parse(`{"workload":{"kind":"trace","trace":"bad.jsonl"}}`, bad).Arrivals(); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("trace without at_ms: %v", err)
	}
}

// Each built-in names the modes it compares, a verdict kind, and its
// companion, if any, is a built-in with the named tenant.
func TestBuiltinModesVerdictsCompanions(t *testing.T) {
	for _, n := range SuiteScenarios() {
		sc, err := LoadScenario(n)
		if err != nil {
			t.Fatal(err)
		}
		if len(sc.Modes) < 2 || sc.Verdict == "" {
			t.Errorf("%s: modes %v, verdict %q; the suite needs both", n, sc.Modes, sc.Verdict)
		}
		if a := sc.Alone; a != nil {
			asc, err := LoadScenario(a.Scenario)
			if err != nil {
				t.Fatalf("%s: alone: %v", n, err)
			}
			if !slices.ContainsFunc(asc.Workload.Tenants, func(tw TenantWorkload) bool { return tw.Name == a.Tenant }) {
				t.Errorf("%s: companion %s has no tenant %s", n, a.Scenario, a.Tenant)
			}
		}
	}
	if sc, _ := LoadScenario("capacity-shift"); !slices.Equal(sc.DefaultModes(), []string{"static-8", "static-32", "adaptive"}) {
		t.Errorf("capacity-shift's modes %v", sc.DefaultModes())
	}
	if sc := mustParse(t, `{"workload":{"kind":"burst","n":1}}`); !slices.Equal(sc.DefaultModes(), []string{ModePlain, ModeWindowed}) {
		t.Errorf("a scenario without modes runs %v; want plain, windowed", sc.DefaultModes())
	}
	if slices.Contains(SuiteScenarios(), "noisy-neighbour-alone") || !slices.Contains(SuiteScenarios(), "noisy-neighbour") {
		t.Errorf("SuiteScenarios = %v: want the scenarios without their companions", SuiteScenarios())
	}
}

// Short keeps a scenario's shape: rates, the upstream's latencies and a
// burst at once above the slots stay; every stretch shrinks.
func TestShort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		check func(t *testing.T, long, short *Scenario)
	}{
		{"spike", func(t *testing.T, l, s *Scenario) {
			if s.Workload.Rate != l.Workload.Rate || s.Workload.Duration != l.Workload.Duration/10 ||
				s.Sim.Spikes[0].From != l.Sim.Spikes[0].From/10 || s.Sim.Spikes[0].To != l.Sim.Spikes[0].To/10 || s.Sim.TTFT != l.Sim.TTFT {
				t.Errorf("short spike %+v %+v", s.Workload, s.Sim)
			}
		}},
		{"budget", func(t *testing.T, l, s *Scenario) {
			// The runaway meets its budget as far into the shorter run.
			if b := s.Sluice.Budgets; len(b) != 1 || b[0].USD != l.Sluice.Budgets[0].USD/10 || l.Sluice.Budgets[0].USD != 1 {
				t.Errorf("short budget's budgets %+v; long %+v", b, l.Sluice.Budgets)
			}
		}},
		{"burst", func(t *testing.T, l, s *Scenario) {
			if s.Workload.N != 16 { // twice the 8 slots, of 64
				t.Errorf("short burst n %d; want 16", s.Workload.N)
			}
		}},
		{"capacity-shift", func(t *testing.T, l, s *Scenario) {
			if s.Sim.CapacitySteps[1].From != l.Sim.CapacitySteps[1].From/10 || s.Workload.Steps[2].Duration != l.Workload.Steps[2].Duration/10 ||
				s.Workload.Steps[2].Rate != l.Workload.Steps[2].Rate {
				t.Errorf("short capacity-shift %+v %+v", s.Sim.CapacitySteps, s.Workload.Steps)
			}
		}},
		{"noisy-neighbour", func(t *testing.T, l, s *Scenario) {
			a, b := s.Workload.Tenants[0], s.Workload.Tenants[1]
			if a.N != 100 || b.N != 4 || b.Duration != l.Workload.Tenants[1].Duration/10 {
				t.Errorf("short tenants %+v", s.Workload.Tenants)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := LoadScenario(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			before := *l
			s := l.Short(ShortFactor)
			tc.check(t, l, s)
			if l.Workload.N != before.Workload.N || (len(l.Sim.Spikes) > 0 && l.Sim.Spikes[0] != before.Sim.Spikes[0]) {
				t.Errorf("Short changed the scenario it was called on")
			}
			if err := s.validate(); err != nil {
				t.Errorf("short %s: %v", tc.name, err)
			}
		})
	}
}
