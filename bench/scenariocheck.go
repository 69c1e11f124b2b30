package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/config"
)

func (sc *Scenario) validate() error {
	s := sc.Sim
	switch {
	case s.TTFT < 0:
		return errors.New("sim.ttft: must not be negative")
	case s.PerToken < 0:
		return errors.New("sim.per_token: must not be negative")
	case s.PrefillPerToken < 0:
		return errors.New("sim.prefill_per_token: must not be negative")
	case s.Jitter < 0 || s.Jitter >= 1:
		return errors.New("sim.jitter: must be in [0, 1)")
	case s.Capacity < 0:
		return errors.New("sim.capacity: must be >= 0 (0 = unlimited)")
	case s.BatchDuration < 0:
		return errors.New("sim.batch_duration: must not be negative")
	case s.OverloadAt < 0:
		return errors.New("sim.overload_at: must be >= 0 (0 = never)")
	case s.RequestsPerMinute < 0 || s.InputTokensPerMinute < 0 || s.OutputTokensPerMinute < 0:
		return errors.New("sim.*_per_minute: must be >= 0 (0 = off)")
	}
	for i, sp := range s.Spikes {
		if sp.Factor <= 0 {
			return fmt.Errorf("sim.spikes[%d].factor: must be > 0", i)
		}
		if sp.To <= sp.From {
			return fmt.Errorf("sim.spikes[%d].to: must be after from", i)
		}
	}
	if err := sc.Sluice.validate("sluice"); err != nil {
		return err
	}
	if s.BucketsSpent < 0 || s.BucketsSpent > 1 {
		return errors.New("sim.buckets_spent: must be in [0, 1]")
	}
	if err := sc.validateOutages(); err != nil {
		return err
	}
	seen := map[string]bool{ModeDirect: true, ModePlain: true, ModeWindowed: true, ModeBulk: true}
	for i, v := range sc.Variants {
		if v.Name == "" || strings.ContainsAny(v.Name, ", ") {
			return fmt.Errorf("variants[%d].name: want a name without commas or spaces", i)
		}
		if seen[v.Name] {
			return fmt.Errorf("variants[%d].name: %q is taken (by a mode or another variant)", i, v.Name)
		}
		seen[v.Name] = true
		if err := v.Sluice.validate(fmt.Sprintf("variants[%d].sluice", i)); err != nil {
			return err
		}
	}
	for i, m := range sc.Modes {
		if m != ModeDirect && m != ModePlain && m != ModeBulk && !sc.Windowed(m) {
			return fmt.Errorf("modes[%d]: %q is not direct, plain, windowed, windowed-fifo, bulk or a variant", i, m)
		}
		if slices.Index(sc.Modes, m) != i {
			return fmt.Errorf("modes[%d]: %q is named twice", i, m)
		}
	}
	if sc.Verdict != "" && verdictKinds[sc.Verdict] == nil {
		return fmt.Errorf("verdict: %q is not one of %s", sc.Verdict, strings.Join(VerdictKinds(), ", "))
	}
	for i, b := range sc.Sluice.Budgets {
		if !slices.ContainsFunc(sc.Workload.Tenants, func(t TenantWorkload) bool { return t.Name == b.Tenant }) {
			return fmt.Errorf("sluice.budgets[%d].tenant: %q is not one of workload.tenants", i, b.Tenant)
		}
		if !(b.USD > 0) || slices.IndexFunc(sc.Sluice.Budgets, func(o BudgetSpec) bool { return o.Tenant == b.Tenant }) != i {
			return fmt.Errorf("sluice.budgets[%d]: usd must be above 0, and a tenant has one budget", i)
		}
	}
	if a := sc.Alone; a != nil {
		if a.Scenario == "" || a.Tenant == "" {
			return errors.New("alone: needs scenario and tenant")
		}
		if !slices.ContainsFunc(sc.Workload.Tenants, func(t TenantWorkload) bool { return t.Name == a.Tenant }) {
			return fmt.Errorf("alone.tenant: %q is not one of workload.tenants", a.Tenant)
		}
	}
	for i, st := range s.CapacitySteps {
		if st.From < 0 || st.Capacity < 0 || st.OverloadAt < 0 {
			return fmt.Errorf("sim.capacity_steps[%d]: from, capacity and overload_at must not be negative", i)
		}
		if i > 0 && st.From <= s.CapacitySteps[i-1].From {
			return fmt.Errorf("sim.capacity_steps[%d].from: must be after the step before", i)
		}
	}
	if sc.Client.Timeout < 0 {
		return errors.New("client.timeout: must not be negative")
	}
	if r := sc.Client.MaxRetries; r != nil && (*r < 0 || *r > 10) {
		return errors.New("client.max_retries: must be in [0, 10]")
	}
	w := sc.Workload
	switch w.Kind {
	case "burst":
		if w.N < 1 {
			return errors.New("workload.n: a burst needs n >= 1")
		}
	case "poisson":
		if w.Rate <= 0 {
			return errors.New("workload.rate: must be > 0 for kind poisson")
		}
		if w.Duration <= 0 {
			return errors.New("workload.duration: must be > 0 for kind poisson")
		}
	case "ramp":
		if w.Rate <= 0 || w.FromRate < 0 {
			return errors.New("workload.rate: must be > 0 (and from_rate >= 0) for kind ramp")
		}
		if w.Duration <= 0 {
			return errors.New("workload.duration: must be > 0 for kind ramp")
		}
	case "steps":
		if len(w.Steps) == 0 {
			return errors.New("workload.steps: kind steps needs at least one step")
		}
		for i, st := range w.Steps {
			if st.Duration <= 0 || st.Rate < 0 {
				return fmt.Errorf("workload.steps[%d]: duration must be > 0 and rate >= 0", i)
			}
		}
	case "trace":
		if w.Trace == "" {
			return errors.New("workload.trace: kind trace needs a file")
		}
	case "tenants":
		if len(w.Tenants) == 0 || w.Turns > 1 {
			return errors.New("workload.tenants: kind tenants needs at least one tenant, and no turns")
		}
		seen := map[string]bool{}
		for i, tw := range w.Tenants {
			if tw.Name == "" || seen[tw.Name] {
				return fmt.Errorf("workload.tenants[%d].name: each tenant needs a name of its own", i)
			}
			seen[tw.Name] = true
			if tw.Kind != "burst" && tw.Kind != "poisson" || tw.Start < 0 {
				return fmt.Errorf("workload.tenants[%d]: kind must be burst or poisson, start >= 0", i)
			}
			sub := Scenario{Workload: Workload{Kind: tw.Kind, N: tw.N, Rate: tw.Rate, Duration: tw.Duration, PromptTokens: tw.PromptTokens, OutputTokens: tw.OutputTokens}}
			if err := sub.validate(); err != nil {
				return fmt.Errorf("workload.tenants[%d]: %w", i, err)
			}
		}
	case "":
		return errors.New("workload.kind: missing; want burst, poisson, steps, ramp, trace or tenants")
	default:
		return fmt.Errorf("workload.kind: %q is not one of burst, poisson, steps, ramp, trace, tenants", w.Kind)
	}
	if w.SharedTools < 0 || w.SharedTools > 0 && w.SharedTools*toolTokens >= w.SharedPrefixTokens {
		return fmt.Errorf("workload.shared_tools: must be >= 0, and its %d tokens a tool must leave some of shared_prefix_tokens for the system prompt", toolTokens)
	}
	switch w.Shape {
	case "":
	case ShapeClaudeCode:
		if w.SharedPrefixTokens != 0 || w.SharedTools != 0 {
			return errors.New("workload.shape: claude-code brings its own tools and system prompt; leave out shared_prefix_tokens and shared_tools")
		}
	default:
		return fmt.Errorf("workload.shape: %q is not claude-code (or empty, for the synthetic shape)", w.Shape)
	}
	if w.PrefixPerSession && (w.SharedPrefixTokens <= 0 || w.Turns < 2 || w.SharedTools > 0) {
		return errors.New("workload.prefix_per_session: needs shared_prefix_tokens, turns >= 2 and no shared_tools")
	}
	if w.SharedPrefixTokens < 0 {
		return errors.New("workload.shared_prefix_tokens: must not be negative")
	}
	if w.Turns < 0 || w.Turns > 50 {
		return errors.New("workload.turns: must be in [0, 50]")
	}
	if w.StreamFraction < 0 || w.StreamFraction > 1 {
		return errors.New("workload.stream_fraction: must be in [0, 1]")
	}
	for _, r := range []struct {
		name string
		v    [2]int
	}{{"workload.prompt_tokens", w.PromptTokens}, {"workload.output_tokens", w.OutputTokens}} {
		if r.v[0] < 0 || r.v[1] < r.v[0] {
			return fmt.Errorf("%s: want [min, max] with 0 <= min <= max", r.name)
		}
	}
	return nil
}

func (s Sluice) validate(where string) error {
	if s.MaxSize < 0 || s.MaxConcurrency < 0 || s.MaxWait < 0 || s.Timeout < 0 || s.LimitFloor < 0 || s.BulkMaxWait < 0 || s.BulkPoll < 0 {
		return fmt.Errorf("%s: max_size, max_wait, max_concurrency, timeout, limit_floor, bulk_max_wait and bulk_poll must not be negative", where)
	}
	if _, err := config.ParseGateLimit(s.Limit); s.Limit != "" && err != nil {
		return fmt.Errorf("%s.limit: %q is not static or adaptive", where, s.Limit)
	}
	if _, err := config.ParsePacing(s.RateLimitPacing); s.RateLimitPacing != "" && err != nil {
		return fmt.Errorf("%s.rate_limit_pacing: want buckets, reset or off, not %q", where, s.RateLimitPacing)
	}
	return validateBackends(where, s.Backends, s.RoutePolicy)
}
