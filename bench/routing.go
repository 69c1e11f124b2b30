package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/sluicehq/sluice/cloud/bedrock"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/upstream"
)

// A scenario's sluice may route over backends (docs/routing.md), as a
// config file's [[backends]] declares them. Every backend of a bench is
// the simulator (the mode's upstream URL); each key is named env:NAME,
// and the bench's sluice reads NAME from benchEnv, which gives each name
// a fake key of its own, so that the simulator, whose rate limits and
// prompt cache are per key, sees each as an organisation of its own.

// BackendSpec is one backend of a scenario's sluice: the config file's
// [[backends]] table without url (the simulator's).
type BackendSpec struct {
	Name string `json:"name"`
	// Kind is "anthropic" (the default) or "bedrock": a Bedrock backend
	// on the simulator's Bedrock paths, signed with its test credentials
	// (benchCloud); it takes no keys.
	Kind string `json:"kind"`
	// Keys are env:NAME references, each read from benchEnv.
	Keys           []string `json:"keys"`
	MaxConcurrency int      `json:"max_concurrency"`
	Weight         float64  `json:"weight"`
}

// OutageSpec is a stretch of the run in which the simulator answers
// every request of a backend's keys (or of every key, when Backend is
// empty) with Status (529 when zero) at once.
type OutageSpec struct {
	From    Duration `json:"from"`
	To      Duration `json:"to"`
	Status  int      `json:"status"`
	Backend string   `json:"backend"`
}

// benchEnv is the environment the bench's sluice reads its backend keys
// from: each variable a fake key of its own, never the process's own
// environment, so that a real key set there never reaches the simulator.
func benchEnv(name string) string { return "sk-bench-upstream-" + strings.ToLower(name) }

// routePolicies are the ROUTE_POLICY values a scenario may name.
var routePolicies = []config.RoutePolicy{config.RouteAffinity, config.RouteRoundRobin}

func parseRoutePolicy(s string) (config.RoutePolicy, bool) {
	for _, p := range routePolicies {
		if p.String() == s {
			return p, true
		}
	}
	return 0, false
}

// backends is the config's form of specs.
func backends(specs []BackendSpec) []config.Backend {
	out := make([]config.Backend, len(specs))
	for i, b := range specs {
		out[i] = config.Backend{Name: b.Name, Kind: "anthropic", Keys: b.Keys, MaxConcurrency: b.MaxConcurrency, Weight: b.Weight}
		if b.Kind == "bedrock" {
			out[i].Kind, out[i].Region = "bedrock", "us-east-1"
		}
	}
	return out
}

// benchCloud builds the client of a bench's Bedrock backend: the
// simulator at base, with the simulator's test credentials, never the
// process's own.
func benchCloud(base string) func(config.Backend) (upstream.Backend, error) {
	return func(b config.Backend) (upstream.Backend, error) {
		if b.Kind != "bedrock" {
			return nil, fmt.Errorf("the bench runs no %s backend", b.Kind)
		}
		return bedrock.New(context.Background(), bedrock.Options{Name: b.Name, Region: b.Region, Endpoint: base,
			Credentials: credentials.NewStaticCredentialsProvider(sim.DefaultBedrockAccessKeyID, sim.DefaultBedrockSecretAccessKey, "")})
	}
}

// backendCredentials are the short hashes (request.Tenant's) of the fake
// keys of the backend called name, wherever the scenario or a variant
// declares it.
func (sc *Scenario) backendCredentials(name string) []string {
	var out []string
	seen := map[string]bool{}
	all := [][]BackendSpec{sc.Sluice.Backends}
	for _, v := range sc.Variants {
		all = append(all, v.Sluice.Backends)
	}
	for _, bs := range all {
		for _, b := range bs {
			if b.Name != name {
				continue
			}
			for _, ref := range b.Keys {
				_, env, _ := strings.Cut(ref, ":")
				if h := keyHash(env); !seen[h] {
					seen[h] = true
					out = append(out, h)
				}
			}
		}
	}
	return out
}

// keyNames names the fake keys of bs by their short hashes: backend/n,
// as sluice names its keys.
func keyNames(bs []config.Backend) map[string]string {
	if len(bs) == 0 {
		return nil
	}
	out := map[string]string{}
	for _, b := range bs {
		for i, ref := range b.Keys {
			_, env, _ := strings.Cut(ref, ":")
			out[keyHash(env)] = fmt.Sprintf("%s/%d", b.Name, i+1)
		}
	}
	return out
}

// keyHash is the short hash (request.Tenant's) of the fake key benchEnv
// gives the variable env.
func keyHash(env string) string { return request.Tenant(http.Header{"X-Api-Key": {benchEnv(env)}}) }

// simOutages are the scenario's outages as the simulator takes them.
func (sc *Scenario) simOutages() []sim.Outage {
	var out []sim.Outage
	for _, o := range sc.Sim.Outages {
		so := sim.Outage{From: o.From.D(), To: o.To.D(), Status: o.Status}
		if o.Backend != "" {
			so.Credentials = sc.backendCredentials(o.Backend)
		}
		out = append(out, so)
	}
	return out
}

// validateBackends checks a scenario's (or a variant's) backends.
func validateBackends(where string, bs []BackendSpec, policy string) error {
	if _, ok := parseRoutePolicy(policy); policy != "" && !ok {
		return fmt.Errorf("%s.route_policy: want affinity or round-robin, not %q", where, policy)
	}
	names := map[string]bool{}
	for i, b := range bs {
		at := fmt.Sprintf("%s.backends[%d]", where, i)
		if b.Name == "" || names[b.Name] {
			return fmt.Errorf("%s.name: each backend needs a name of its own", at)
		}
		names[b.Name] = true
		switch {
		case b.Kind != "" && b.Kind != "anthropic" && b.Kind != "bedrock":
			return fmt.Errorf("%s.kind: want anthropic or bedrock, not %q", at, b.Kind)
		case b.Kind == "bedrock" && len(b.Keys) > 0:
			return fmt.Errorf("%s.keys: a bedrock backend takes none (it signs with the simulator's test credentials)", at)
		case b.Kind != "bedrock" && len(b.Keys) == 0:
			return fmt.Errorf("%s.keys: name at least one, as \"env:NAME\"", at)
		}
		for _, k := range b.Keys {
			if env, ok := strings.CutPrefix(k, "env:"); !ok || env == "" {
				return fmt.Errorf("%s.keys: %q: a bench key is named \"env:NAME\" (the bench gives NAME a fake key)", at, k)
			}
		}
		if b.MaxConcurrency < 0 || b.Weight < 0 {
			return fmt.Errorf("%s: max_concurrency and weight must not be negative", at)
		}
	}
	return nil
}

// validateOutages checks the scenario's outages: in order, each naming a
// backend the scenario or a variant declares, if any.
func (sc *Scenario) validateOutages() error {
	for i, o := range sc.Sim.Outages {
		at := fmt.Sprintf("sim.outages[%d]", i)
		if o.From < 0 || o.To <= o.From {
			return fmt.Errorf("%s: want 0 <= from < to", at)
		}
		if o.Status != 0 && o.Status != 429 && o.Status != 500 && o.Status != 529 {
			return fmt.Errorf("%s.status: want 429, 500 or 529 (0: 529)", at)
		}
		if o.Backend != "" && len(sc.backendCredentials(o.Backend)) == 0 {
			return fmt.Errorf("%s.backend: %q is no backend of the scenario's or its variants' sluice", at, o.Backend)
		}
	}
	return nil
}
