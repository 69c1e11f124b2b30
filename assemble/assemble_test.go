package assemble

import (
	"bytes"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/dispatch/buckets"
	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/dispatch/tenants"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/route"
)

// load is the configuration of env over the defaults, windowed.
func load(t *testing.T, env map[string]string) config.Config {
	t.Helper()
	full := map[string]string{"BATCH_ENABLED": "1"}
	for k, v := range env {
		full[k] = v
	}
	c, err := config.Load(nil, func(k string) (string, bool) { v, ok := full[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func build(t *testing.T, c config.Config, env Env) *Parts {
	t.Helper()
	ps, err := Build(c, env)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// Without windowing there is no gate, no admission, no pacing and no
// releaser; the tenant policy, the retry budget and the pacer are there
// for the plain path too.
func TestPlainHasNoWindowedParts(t *testing.T) {
	ps := build(t, load(t, map[string]string{"BATCH_ENABLED": "0"}), Env{})
	if ps.Gate != nil || ps.Admission != nil || ps.Releaser != nil || ps.Buckets != nil || ps.Cache != nil {
		t.Errorf("plain parts %+v; want no windowed part", ps)
	}
	if ps.Metrics == nil || ps.Tenants == nil || ps.RetryBudget == nil || ps.Pacer == nil {
		t.Errorf("plain parts %+v; want metrics, tenants, a retry budget and a pacer", ps)
	}
}

// RATE_LIMIT_PACING picks the buckets, the reset hold at the end of the
// admission chain, or neither; ADMIT_BY_CLIENT_TIMEOUT puts the
// client-timeout admission first; BATCH_MAX_QUEUE bounds in between.
func TestAdmissionAndPacingByTheSettings(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		chain   string // the admission chain's parts, by kind
		buckets bool
	}{
		{map[string]string{}, "timeout queue", true},
		{map[string]string{"RATE_LIMIT_PACING": "reset"}, "timeout queue hold", false},
		{map[string]string{"RATE_LIMIT_PACING": "off", "ADMIT_BY_CLIENT_TIMEOUT": "0"}, "queue", false},
	} {
		ps := build(t, load(t, tc.env), Env{})
		var kinds []string
		for _, a := range ps.Admission.(dispatch.Chain) {
			switch a := a.(type) {
			case dispatch.ClientTimeout:
				kinds = append(kinds, "timeout")
			case dispatch.QueueBound:
				if a.Max != 1024 {
					t.Errorf("%v: queue bound %d; want BATCH_MAX_QUEUE's 1024", tc.env, a.Max)
				}
				kinds = append(kinds, "queue")
			case dispatch.RateLimitHold:
				if a.Pacer != ps.Pacer {
					t.Errorf("%v: the hold reads another pacer than the proxy feeds", tc.env)
				}
				kinds = append(kinds, "hold")
			default:
				kinds = append(kinds, "?")
			}
		}
		if got := strings.Join(kinds, " "); got != tc.chain {
			t.Errorf("%v: admission chain %q; want %q", tc.env, got, tc.chain)
		}
		if (ps.Buckets != nil) != tc.buckets {
			t.Errorf("%v: buckets %v; want %v", tc.env, ps.Buckets != nil, tc.buckets)
		}
		if ps.Buckets != nil {
			if _, local := ps.Buckets.Buckets.(*pace.Buckets); !local {
				t.Errorf("%v: the buckets are kept in %T; want this process's", tc.env, ps.Buckets.Buckets)
			}
		}
	}
}

// CACHE_AWARE makes the cache-aware releaser the releaser, and a learner
// of each answer's usage; off, the waves go at once in arrival order.
func TestCacheAwareIsTheReleaser(t *testing.T) {
	ps := build(t, load(t, map[string]string{}), Env{})
	if ps.Cache == nil || ps.Releaser != dispatch.Releaser(ps.Cache) || ps.Cache.LeaderWait != load(t, nil).CacheLeaderWait {
		t.Errorf("CACHE_AWARE=1: cache %v, releaser %v; want the cache-aware releaser", ps.Cache, ps.Releaser)
	}
	// It hears each answer's usage, or its doubts never learn a read.
	if len(ps.Learners) != 1 || ps.Learners[0] != dispatch.Learner(ps.Cache) {
		t.Errorf("CACHE_AWARE=1: learners %v; want the cache-aware releaser", ps.Learners)
	}
	if ps := build(t, load(t, map[string]string{"CACHE_AWARE": "0"}), Env{}); ps.Cache != nil || ps.Releaser != nil || ps.Learners != nil {
		t.Errorf("CACHE_AWARE=0: cache %v, releaser %v, learners %v; want none", ps.Cache, ps.Releaser, ps.Learners)
	}
}

// GATE_ORDER=fair grants an interactive ticket before a batch one that
// joined first; fifo in arrival order.
// RELEASE_SHORTEST_FIRST puts the shortest-first release in the chain,
// after the cache-aware one.
func TestShortestFirstBySetting(t *testing.T) {
	ps := build(t, load(t, map[string]string{"RELEASE_SHORTEST_FIRST": "1"}), Env{})
	chain, ok := ps.Releaser.(dispatch.Releasers)
	if !ok || len(chain) != 2 || chain[0] != dispatch.Releaser(ps.Cache) || chain[1] != dispatch.Releaser(dispatch.ShortestFirst{}) {
		t.Errorf("RELEASE_SHORTEST_FIRST=1: releaser %#v; want the cache-aware release, then shortest first", ps.Releaser)
	}
	ps = build(t, load(t, map[string]string{"RELEASE_SHORTEST_FIRST": "1", "CACHE_AWARE": "0"}), Env{})
	if ps.Releaser != dispatch.Releaser(dispatch.ShortestFirst{}) {
		t.Errorf("RELEASE_SHORTEST_FIRST=1, CACHE_AWARE=0: releaser %#v; want shortest first alone", ps.Releaser)
	}
}

func TestGateOrderBySetting(t *testing.T) {
	for order, first := range map[string]gate.Class{"fair": gate.ClassInteractive, "fifo": gate.ClassBatch} {
		ps := build(t, load(t, map[string]string{"GATE_ORDER": order, "BATCH_MAX_CONCURRENCY": "1"}), Env{})
		holder := &gate.Ticket{Key: "a"}
		ps.Gate.Join(holder)
		batch, interactive := &gate.Ticket{Key: "b", Class: gate.ClassBatch}, &gate.Ticket{Key: "c", Class: gate.ClassInteractive}
		ps.Gate.Join(batch)
		ps.Gate.Join(interactive)
		ps.Gate.Release(holder, gate.Outcome{End: gate.EndOK})
		got := gate.ClassBatch
		if interactive.State() == gate.TicketGranted {
			got = gate.ClassInteractive
		}
		if got != first {
			t.Errorf("GATE_ORDER=%s: %v granted first; want %v", order, got, first)
		}
	}
}

// GATE_LIMIT=adaptive gives up a slot after an overloaded answer, and the
// metrics count the change; static keeps BATCH_MAX_CONCURRENCY.
func TestGateLimitBySetting(t *testing.T) {
	for limit, after := range map[string]int{"static": 12, "adaptive": 9} {
		ps := build(t, load(t, map[string]string{"GATE_LIMIT": limit, "GATE_LIMIT_FLOOR": "3", "BATCH_MAX_CONCURRENCY": "12"}), Env{})
		tk := &gate.Ticket{}
		ps.Gate.Join(tk)
		ps.Gate.Release(tk, gate.Outcome{End: gate.EndOverloaded, InFlight: 1})
		if got := ps.Gate.Stats().Capacity; got != after {
			t.Errorf("GATE_LIMIT=%s: capacity %d after a 529; want %d", limit, got, after)
		}
		var m dto.Metric
		if err := ps.Metrics.GateLimitChanges.WithLabelValues("down").Write(&m); err != nil {
			t.Fatal(err)
		}
		downs := m.GetCounter().GetValue()
		if (downs > 0) != (limit == "adaptive") {
			t.Errorf("GATE_LIMIT=%s: %v changes down counted", limit, downs)
		}
	}
}

// fakeShared is a shared store that says what it was asked for.
type fakeShared struct {
	order   config.GateOrder
	asked   []string
	buckets *pace.Buckets
}

func (f *fakeShared) Gate(order config.GateOrder, capacity int) (gate.Gate, error) {
	f.order = order
	f.asked = append(f.asked, "gate")
	return gate.New(gate.Fixed(capacity), nil)
}

func (f *fakeShared) Buckets() buckets.Store {
	f.asked = append(f.asked, "buckets")
	return f.buckets
}

func (f *fakeShared) CacheGroups() cacheaware.Share {
	f.asked = append(f.asked, "cache")
	return nil
}

func (f *fakeShared) Lane(key string, capacity int) (gate.Gate, error) {
	f.asked = append(f.asked, "lane "+key)
	return gate.New(gate.Fixed(capacity), nil)
}

func (f *fakeShared) Routes() route.Share {
	f.asked = append(f.asked, "routes")
	return &fakeNews{}
}

type fakeNews struct{}

func (*fakeNews) Publish(string)          {}
func (*fakeNews) Listen(func(msg string)) {}

// With [[backends]] the parts route: a pool of their keys with the
// router of ROUTE_POLICY, and a gate with a lane per key, capped at its
// backend's max_concurrency (BATCH_MAX_CONCURRENCY if none); under
// GATE_BACKEND=redis the lanes and the pool's news are the fleet's.
func TestBackendsRoute(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:1")
	c := load(t, map[string]string{"BATCH_MAX_CONCURRENCY": "7", "ROUTE_POLICY": "round-robin"})
	c.Backends = []config.Backend{
		{Name: "a", Kind: "anthropic", URL: u, Keys: []string{"env:KA"}, MaxConcurrency: 2},
		{Name: "b", Kind: "anthropic", Keys: []string{"env:KB"}},
	}
	env := Env{Getenv: func(k string) string { return "sk-" + k }}
	ps := build(t, c, env)
	if ps.Routes == nil || len(ps.Routes.Keys) != 2 {
		t.Fatalf("routes: %+v; want a pool of 2 keys", ps.Routes)
	}
	if _, ok := ps.Router.(*route.RoundRobin); !ok {
		t.Errorf("router %T; want round robin", ps.Router)
	}
	lanes, ok := ps.Gate.(*gate.Lanes)
	if !ok {
		t.Fatalf("gate %T; want lanes", ps.Gate)
	}
	if a, b := lanes.Lane(1).Stats().Capacity, lanes.Lane(2).Stats().Capacity; a != 2 || b != 7 {
		t.Errorf("lane caps %d, %d; want 2 and 7", a, b)
	}
	if _, err := Build(c, Env{Getenv: func(string) string { return "" }}); err == nil || !strings.Contains(err.Error(), "env:KA") {
		t.Errorf("a key unset: %v; want an error naming its reference", err)
	}
	c.Backends = append(c.Backends, config.Backend{Name: "cloud", Kind: "bedrock", Region: "us-east-1"})
	if _, err := Build(c, env); err == nil || !strings.Contains(err.Error(), "not built into") {
		t.Errorf("a cloud backend without Env.Cloud: %v", err)
	}
	c.Backends = c.Backends[:2]
	// Limits the file declares pace the backend's keys from the start.
	c.Backends[0].InputTokensPerMinute = 1000
	ps = build(t, c, env)
	store, now := ps.Buckets.Buckets, time.Now()
	for _, k := range ps.Routes.Keys {
		store.Take(k.Hash, pace.Cost{Input: 900, Output: 1}, now)
	}
	if at := store.FitsAt(ps.Routes.Keys[0].Hash, pace.Cost{Input: 500, Output: 1}, now); !at.After(now) {
		t.Error("a key of input_tokens_per_minute = 1000 takes 500 more input tokens at once after 900")
	}
	if at := store.FitsAt(ps.Routes.Keys[1].Hash, pace.Cost{Input: 500, Output: 1}, now); at.After(now) {
		t.Error("a key without declared limits holds a request")
	}
	c.GateBackend = config.GateRedis
	c.RedisURL = "redis://127.0.0.1:1"
	f := &fakeShared{buckets: &pace.Buckets{}}
	build(t, c, Env{Getenv: env.Getenv, Shared: f})
	if got := strings.Join(f.asked, ", "); got != "buckets, gate, lane a/1, lane b/1, routes, cache" {
		t.Errorf("asked the shared store for %s; want the buckets, the gate, a lane per key, the routes' news and the cache groups", got)
	}
}

// Under GATE_BACKEND=redis the gate, the buckets and the cache groups
// come from the shared store, each only when its setting uses it.
func TestSharedPartsComeFromTheSharedStore(t *testing.T) {
	env := map[string]string{"GATE_BACKEND": "redis", "REDIS_URL": "redis://127.0.0.1:1"}
	if _, err := Build(load(t, env), Env{}); err == nil {
		t.Error("GATE_BACKEND=redis built without a shared store")
	}
	f := &fakeShared{buckets: &pace.Buckets{}}
	ps := build(t, load(t, env), Env{Shared: f})
	if strings.Join(f.asked, " ") != "buckets gate cache" || f.order != config.GateOrderFair || ps.Buckets.Buckets != buckets.Store(f.buckets) {
		t.Errorf("asked the shared store for %v (order %v); want the fair gate, the buckets and the cache groups", f.asked, f.order)
	}
	env["RATE_LIMIT_PACING"], env["CACHE_AWARE"], env["GATE_ORDER"] = "reset", "0", "fifo"
	f = &fakeShared{}
	build(t, load(t, env), Env{Shared: f})
	if strings.Join(f.asked, " ") != "gate" || f.order != config.GateOrderFIFO {
		t.Errorf("asked the shared store for %v (order %v); want the FIFO gate alone", f.asked, f.order)
	}
}

// The tenant policy takes TENANT_FROM; with inbound keys and a tenant the
// client names, the start-up log says whose limits bind, and under
// gateway without inbound keys, that the gateway's headers are taken from
// anyone.
func TestTenantsBySetting(t *testing.T) {
	var logs bytes.Buffer
	c := load(t, map[string]string{"TENANT_FROM": "header", "INBOUND_KEYS_FILE": "keys.json"})
	ps := build(t, c, Env{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if !strings.Contains(logs.String(), "TENANT_FROM=header with inbound keys") {
		t.Errorf("no start-up line about inbound keys' limits; the log: %s", logs.String())
	}
	if _, ok := ps.Tenants.(*tenants.Table); !ok {
		t.Errorf("tenants %T; want today's tenants.Table", ps.Tenants)
	}
	// Under TENANT_FROM=gateway, anyone who reaches sluice can name a
	// developer unless only the gateway holds a sluice key: said at start.
	const warning = "TENANT_FROM=gateway without INBOUND_KEYS_FILE"
	for _, keys := range []string{"", "keys.json"} {
		logs.Reset()
		build(t, load(t, map[string]string{"TENANT_FROM": "gateway", "INBOUND_KEYS_FILE": keys}), Env{Log: slog.New(slog.NewTextHandler(&logs, nil))})
		if got := strings.Contains(logs.String(), warning); got != (keys == "") {
			t.Errorf("INBOUND_KEYS_FILE=%q: warned %v; the log: %s", keys, got, logs.String())
		}
	}
}

// Build refuses a configuration that does not validate.
func TestBuildValidates(t *testing.T) {
	c := load(t, nil)
	c.UpstreamURL, _ = url.Parse("http://127.0.0.1:1")
	c.BodyBudget = 0
	if _, err := Build(c, Env{}); err == nil || !strings.Contains(err.Error(), "BODY_BUDGET_MB") {
		t.Errorf("a zero body budget: %v; want a refusal naming BODY_BUDGET_MB", err)
	}
}
