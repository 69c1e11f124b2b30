package bench

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
)

// SimConfig is the simulator configuration of the scenario.
func (sc *Scenario) SimConfig() sim.Config {
	c := sim.Config{
		Seed: sc.Seed, TTFT: sc.Sim.TTFT.D(), PerToken: sc.Sim.PerToken.D(), PrefillPerToken: sc.Sim.PrefillPerToken.D(), Jitter: sc.Sim.Jitter,
		Capacity: sc.Sim.Capacity, OverloadAt: sc.Sim.OverloadAt,
		RequestsPerMinute: sc.Sim.RequestsPerMinute, InputTokensPerMinute: sc.Sim.InputTokensPerMinute,
		OutputTokensPerMinute: sc.Sim.OutputTokensPerMinute, BatchDuration: sc.Sim.BatchDuration.D(),
		BucketsSpent: sc.Sim.BucketsSpent, Outages: sc.simOutages(), OutputTokensMax: sc.Sim.OutputTokensMax,
		// The Bedrock paths take the test credentials a bench's Bedrock
		// backend signs with (benchCloud).
		BedrockAccessKeyID: sim.DefaultBedrockAccessKeyID, BedrockSecretAccessKey: sim.DefaultBedrockSecretAccessKey,
	}
	for _, sp := range sc.Sim.Spikes {
		c.Spikes = append(c.Spikes, sim.Spike{From: sp.From.D(), To: sp.To.D(), Factor: sp.Factor})
	}
	for _, st := range sc.Sim.CapacitySteps {
		c.CapacitySteps = append(c.CapacitySteps, sim.CapacityStep{From: st.From.D(), Capacity: st.Capacity, OverloadAt: st.OverloadAt})
	}
	return c
}

// ModeConfig is sluice's configuration for a mode: SluiceConfig for
// direct, plain and windowed; a variant's is windowed, with its own
// settings over the scenario's.
func (sc *Scenario) ModeConfig(mode string) config.Config {
	if v := sc.Variant(mode); v != nil {
		c := sc.SluiceConfig(true)
		v.Sluice.apply(&c)
		return c
	}
	c := sc.SluiceConfig(mode == ModeWindowed || mode == ModeWindowedFIFO)
	if mode == ModeWindowedFIFO {
		c.GateOrder = config.GateOrderFIFO // one line for every tenant, against the default fair one
	}
	return c
}

// Windowed reports whether mode goes through sluice's window and gate.
func (sc *Scenario) Windowed(mode string) bool {
	return mode == ModeWindowed || mode == ModeWindowedFIFO || sc.Variant(mode) != nil
}

// SluiceConfig is sluice's configuration for a mode: the seed's defaults,
// overridden by the scenario, with windowing on or off.
func (sc *Scenario) SluiceConfig(windowed bool) config.Config {
	c := config.Default()
	c.Enabled = windowed
	sc.Sluice.apply(&c)
	return c
}

// apply sets s's non-zero fields in c.
func (s Sluice) apply(c *config.Config) {
	if v := s.MaxSize; v > 0 {
		c.MaxSize = v
	}
	if v := s.MaxWait; v > 0 {
		c.MaxWait = v.D()
	}
	if v := s.MaxConcurrency; v > 0 {
		c.MaxConcurrency = v
	}
	if v := s.Timeout; v > 0 {
		c.Timeout = v.D()
	}
	if v := s.IdleRelease; v != nil {
		c.IdleRelease = *v
	}
	if v, err := config.ParseGateLimit(s.Limit); s.Limit != "" && err == nil { // validate refused any other
		c.GateLimit = v
	}
	if v := s.LimitFloor; v > 0 {
		c.GateLimitFloor = v
	}
	if v, err := config.ParsePacing(s.RateLimitPacing); s.RateLimitPacing != "" && err == nil {
		c.RateLimitPacing = v
	}
	if v := s.BulkMaxWait; v > 0 {
		c.BulkMaxWait = v.D()
	}
	if v := s.BulkPoll; v > 0 {
		c.BulkPoll = v.D()
	}
	if len(s.Budgets) > 0 {
		c.Budgets = nil
		for _, b := range s.Budgets {
			c.Budgets = append(c.Budgets, b.spec())
		}
	}
	if len(s.Backends) > 0 {
		c.Backends = backends(s.Backends)
	}
	if v, ok := parseRoutePolicy(s.RoutePolicy); ok {
		c.RoutePolicy = v
	}
}

// spec is b as sluice takes it: the tenant is the one sluice names the
// bench tenant's requests by (TENANT_FROM=key: a short hash of its API
// key, sk-bench-<tenant>), and the budget is named after the bench
// tenant. validate refused one spec.Check would.
func (b BudgetSpec) spec() budget.Spec {
	sp := budget.Spec{Name: budgetName(b.Tenant), Tenant: request.Tenant(http.Header{"X-Api-Key": {"sk-bench-" + b.Tenant}}),
		Unit: budget.USD, Limit: b.USD, Period: budget.Day}
	_ = sp.Check()
	return sp
}

// budgetName is the name of the budget on a bench tenant.
func budgetName(tenant string) string { return "bench:" + tenant }

// ClientTimeout is the per-attempt timeout.
func (sc *Scenario) ClientTimeout() time.Duration {
	if sc.Client.Timeout > 0 {
		return sc.Client.Timeout.D()
	}
	return 60 * time.Second
}

// MaxRetries is how many retries a client makes.
func (sc *Scenario) MaxRetries() int {
	if sc.Client.MaxRetries != nil {
		return *sc.Client.MaxRetries
	}
	return 2
}
