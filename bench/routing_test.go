package bench

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// A variant's backends and route policy reach sluice's configuration;
// the scenario's outage of a backend reaches the simulator as its keys'
// hashes, and --short scales it.
func TestScenarioBackendsAndOutages(t *testing.T) {
	sc := mustParse(t, `{"name":"b","workload":{"kind":"burst","n":1},
		"sim":{"buckets_spent":0.5,"outages":[{"from":"10s","to":"20s","backend":"primary"},{"from":"1s","to":"2s","status":500}]},
		"modes":["one","two"],
		"variants":[
		  {"name":"one","sluice":{"backends":[{"name":"primary","keys":["env:K_A","env:K_B"],"max_concurrency":3}]}},
		  {"name":"two","sluice":{"route_policy":"round-robin","backends":[{"name":"primary","keys":["env:K_A","env:K_B"]},{"name":"secondary","keys":["env:K_C"],"weight":2}]}}]}`)
	one, two := sc.ModeConfig("one"), sc.ModeConfig("two")
	if len(one.Backends) != 1 || one.Backends[0].MaxConcurrency != 3 || !slices.Equal(one.Backends[0].Keys, []string{"env:K_A", "env:K_B"}) ||
		one.Backends[0].Kind != "anthropic" || one.Backends[0].URL != nil || one.RoutePolicy != config.RouteAffinity {
		t.Errorf("one: backends %+v, policy %s", one.Backends, one.RoutePolicy)
	}
	if len(two.Backends) != 2 || two.Backends[1].Name != "secondary" || two.Backends[1].Weight != 2 || two.RoutePolicy != config.RouteRoundRobin {
		t.Errorf("two: backends %+v, policy %s", two.Backends, two.RoutePolicy)
	}
	if c := sc.ModeConfig(ModePlain); len(c.Backends) != 0 {
		t.Errorf("plain has backends %+v; want the scenario's, none", c.Backends)
	}
	if benchEnv("K_A") == benchEnv("K_B") || !strings.HasPrefix(benchEnv("K_A"), "sk-bench-") {
		t.Errorf("fake keys %q and %q; want two of their own", benchEnv("K_A"), benchEnv("K_B"))
	}
	sim := sc.SimConfig()
	if sim.BucketsSpent != 0.5 || len(sim.Outages) != 2 {
		t.Fatalf("sim config: buckets spent %v, outages %+v", sim.BucketsSpent, sim.Outages)
	}
	o := sim.Outages[0]
	if o.From != 10*time.Second || o.To != 20*time.Second || !slices.Equal(o.Credentials, []string{keyHash("K_A"), keyHash("K_B")}) {
		t.Errorf("primary's outage %+v; want 10s-20s on K_A's and K_B's hashes", o)
	}
	if o := sim.Outages[1]; o.Status != 500 || o.Credentials != nil {
		t.Errorf("everyone's outage %+v; want status 500 on every key", o)
	}
	if o := sc.Short(0.1).SimConfig().Outages[0]; o.From != time.Second || o.To != 2*time.Second {
		t.Errorf("short outage %s-%s; want 1s-2s", o.From, o.To)
	}
}

func TestScenarioBackendErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"sluice":{"backends":[{"name":"a","keys":["file:/run/key"]}]}}`, `sluice.backends[0].keys: "file:/run/key"`},
		{`{"sluice":{"backends":[{"name":"a","keys":[]}]}}`, `sluice.backends[0].keys: name at least one`},
		{`{"sluice":{"backends":[{"name":"a","keys":["env:A"]},{"name":"a","keys":["env:B"]}]}}`, `sluice.backends[1].name`},
		{`{"variants":[{"name":"v","sluice":{"route_policy":"random"}}]}`, `variants[0].sluice.route_policy: want affinity or round-robin`},
		{`{"sim":{"outages":[{"from":"1s","to":"2s","backend":"nope"}]}}`, `sim.outages[0].backend: "nope"`},
		{`{"sim":{"outages":[{"from":"2s","to":"1s"}]}}`, `sim.outages[0]: want 0 <= from < to`},
		{`{"sim":{"outages":[{"from":"1s","to":"2s","status":503}]}}`, `sim.outages[0].status`},
		{`{"sim":{"buckets_spent":1.5}}`, `sim.buckets_spent`},
		{`{"workload":{"kind":"burst","n":1,"prefix_per_session":true,"shared_prefix_tokens":2000}}`, `workload.prefix_per_session`},
	} {
		js := tc.json
		if !strings.Contains(js, `"workload"`) {
			js = strings.TrimSuffix(js, "}") + `,"workload":{"kind":"burst","n":1}}`
		}
		_, err := ParseScenario([]byte(js), "t.json", nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseScenario(%s) error = %v; want it to mention %q", js, err, tc.want)
		}
	}
}

// Through backends the simulator sees sluice's keys, never the client's:
// round robin spreads a burst over both, and a backend that is down the
// whole run is failed over from before any client sees its 529.
func TestRoutedRun(t *testing.T) {
	sc := mustParse(t, `{"name":"routed","seed":3,
		"sim":{"ttft":"10ms","per_token":"1ms","outages":[{"from":"0s","to":"1h","backend":"down"}]},
		"client":{"max_retries":0},
		"modes":["in-turn","failover"],
		"variants":[
		  {"name":"in-turn","sluice":{"route_policy":"round-robin","backends":[{"name":"pool","keys":["env:K_A","env:K_B"]}]}},
		  {"name":"failover","sluice":{"backends":[{"name":"down","keys":["env:K_DOWN"]},{"name":"up","keys":["env:K_UP"]}]}}],
		"workload":{"kind":"burst","n":6,"duration":"60ms","prompt_tokens":[10,20],"output_tokens":[4,8]}}`)
	rep, err := Run(context.Background(), Options{Scenario: sc})
	if err != nil {
		t.Fatal(err)
	}
	creds := func(i int) map[string]int64 { return rep.Results()[i].Sim.Credentials }
	if got := creds(0); got["x-api-key "+keyHash("K_A")] != 3 || got["x-api-key "+keyHash("K_B")] != 3 || len(got) != 2 {
		t.Errorf("in turn: the simulator saw %v; want 3 calls on each of the two keys, nothing else", got)
	}
	if got := rep.Modes[0].UpstreamByKey; !maps.Equal(got, map[string]int64{"pool/1": 3, "pool/2": 3}) {
		t.Errorf("in turn: calls by key %v; want 3 on each", got)
	}
	m := rep.Modes[1]
	if got := m.UpstreamByKey; got["up/1"] != 6 || got["down/1"] < 1 {
		t.Errorf("failover: calls by key %v; want 6 on up/1 and some on down/1", got)
	}
	if m.Succeeded != 6 || m.Upstream529 == 0 {
		t.Errorf("failover: %d of 6 served, %d upstream 529s; want all served, some 529s failed over", m.Succeeded, m.Upstream529)
	}
	if got := creds(1); got["x-api-key "+keyHash("K_UP")] != 6 || len(got) != 2 {
		t.Errorf("failover: the simulator saw %v; want every request on the backend that is up, some tried on the one down", got)
	}
}

// With prefix_per_session each session's turns share a system prompt of
// their own: turn 0 of each writes it and the later turns read it.
func TestPrefixPerSession(t *testing.T) {
	const js = `{"name":"own","seed":2,"sim":{"ttft":"10ms","per_token":"1ms"},
		"workload":{"kind":"burst","n":2,"duration":"400ms","turns":2,"stream_fraction":1,"shared_prefix_tokens":2000,%s
		            "prompt_tokens":[10,20],"output_tokens":[4,8]}}`
	reads := func(opt string) (int, int) {
		rep, err := Run(context.Background(), Options{Scenario: mustParse(t, strings.Replace(js, "%s", opt, 1)), Modes: []string{ModePlain}})
		if err != nil {
			t.Fatal(err)
		}
		return rep.Modes[0].TTFTReadMS.N, rep.Modes[0].TTFTWriteMS.N
	}
	if r, w := reads(`"prefix_per_session":true,`); r != 2 || w != 2 {
		t.Errorf("own prefixes: %d streams read, %d wrote; want each session's second turn to read, its first to write", r, w)
	}
	if r, w := reads(""); r != 3 || w != 1 {
		t.Errorf("one shared prefix: %d streams read, %d wrote; want all but the first to read", r, w)
	}
	if a, b := ownPrefix(1, 2000), ownPrefix(2, 2000); a == b || len(a) < 8000 {
		t.Errorf("two sessions' prefixes alike, or short: %d characters", len(a))
	}
}
