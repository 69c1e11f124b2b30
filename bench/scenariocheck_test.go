package bench

import (
	"strings"
	"testing"
)

func TestScenarioErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"workload":{"kind":"burst","n":3},"colour":1}`, `unknown field "colour"`},
		{`{"workload":{"kind":"burst","n":3,"speed":2}}`, `unknown field "speed"`},
		{`{"sim":{"capacity":"lots"},"workload":{"kind":"burst","n":3}}`, `sim.capacity`},
		{`{"sim":{"ttft":300},"workload":{"kind":"burst","n":3}}`, `duration string`},
		{`{"sim":{"ttft":"3 parsecs"},"workload":{"kind":"burst","n":3}}`, `duration string`},
		{`{"workload":{"kind":"poisson","duration":"1s"}}`, `workload.rate`},
		{`{"workload":{"kind":"poisson","rate":3}}`, `workload.duration`},
		{`{"workload":{"kind":"wave"}}`, `workload.kind: "wave"`},
		{`{"workload":{}}`, `workload.kind: missing`},
		{`{"workload":{"kind":"burst"}}`, `workload.n`},
		{`{"workload":{"kind":"steps","steps":[{"duration":"1s","rate":-1}]}}`, `workload.steps[0]`},
		{`{"workload":{"kind":"burst","n":1,"stream_fraction":2}}`, `workload.stream_fraction`},
		{`{"workload":{"kind":"burst","n":1,"output_tokens":[9,3]}}`, `workload.output_tokens`},
		{`{"sim":{"spikes":[{"from":"2s","to":"1s","factor":3}]},"workload":{"kind":"burst","n":1}}`, `sim.spikes[0].to`},
		{`{"client":{"max_retries":-1},"workload":{"kind":"burst","n":1}}`, `client.max_retries`},
		{"{\n\"workload\": {,}}", `line 2`},
		{`{"modes":["plain","fast"],"workload":{"kind":"burst","n":1}}`, `modes[1]: "fast"`},
		{`{"modes":["plain","plain"],"workload":{"kind":"burst","n":1}}`, `modes[1]: "plain" is named twice`},
		{`{"verdict":"vibes","workload":{"kind":"burst","n":1}}`, `verdict: "vibes" is not one of budget, bulk, cache, capacity, failover, keypool, latency`},
		{`{"alone":{"scenario":"x"},"workload":{"kind":"burst","n":1}}`, `alone: needs scenario and tenant`},
		{`{"workload":{"kind":"burst","n":1,"shape":"cursor"}}`, `workload.shape: "cursor"`},
		{`{"workload":{"kind":"burst","n":1,"shape":"claude-code","shared_prefix_tokens":9000}}`, `workload.shape: claude-code brings its own`},
		{`{"sluice":{"budgets":[{"tenant":"z","usd":1}]},"workload":{"kind":"tenants","tenants":[{"name":"a","kind":"burst","n":1}]}}`, `sluice.budgets[0].tenant: "z"`},
		{`{"sluice":{"budgets":[{"tenant":"a","usd":0}]},"workload":{"kind":"tenants","tenants":[{"name":"a","kind":"burst","n":1}]}}`, `sluice.budgets[0]: usd must be above 0`},
		{`{"sluice":{"budgets":[{"tenant":"a","usd":1},{"tenant":"a","usd":2}]},"workload":{"kind":"tenants","tenants":[{"name":"a","kind":"burst","n":1}]}}`, `sluice.budgets[1]`},
		{`{"alone":{"scenario":"x","tenant":"z"},"workload":{"kind":"tenants","tenants":[{"name":"a","kind":"burst","n":1}]}}`, `alone.tenant: "z"`},
	} {
		_, err := ParseScenario([]byte(tc.json), "t.json", nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseScenario(%s) error = %v; want it to mention %q", tc.json, err, tc.want)
		}
	}
}
