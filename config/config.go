// Package config holds every sluice setting in one struct and one table: the
// table is read from flags, the environment and a TOML config file (a flag
// beats the environment, which beats the file, which beats the default),
// validated with messages that name the setting, and printed by --help and
// in docs/settings.md from the same rows.
package config

import (
	"errors"
	"log/slog"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/oidcauth"
	"github.com/sluicehq/sluice/price"
)

// Config is the proxy's whole configuration.
type Config struct {
	Enabled              bool          // BATCH_ENABLED
	MaxSize              int           // BATCH_MAX_SIZE
	MaxWait              time.Duration // BATCH_MAX_WAIT_MS
	IdleRelease          bool          // BATCH_IDLE_RELEASE
	RateLimitPacing      Pacing        // RATE_LIMIT_PACING
	MaxConcurrency       int           // BATCH_MAX_CONCURRENCY
	GateLimit            GateLimit     // GATE_LIMIT
	GateLimitFloor       int           // GATE_LIMIT_FLOOR
	Timeout              time.Duration // BATCH_TIMEOUT_S
	ListenAddr           string        // LISTEN_ADDR
	UpstreamURL          *url.URL      // UPSTREAM_URL
	StreamIdleTimeout    time.Duration // STREAM_IDLE_TIMEOUT_S
	StreamClientStall    time.Duration // STREAM_CLIENT_STALL_S; 0: none
	DrainTimeout         time.Duration // DRAIN_TIMEOUT_S
	UIEnabled            bool          // UI_ENABLED
	MaxQueue             int           // BATCH_MAX_QUEUE
	AdmitByClientTimeout bool          // ADMIT_BY_CLIENT_TIMEOUT
	RetryMaxAttempts     int           // RETRY_MAX_ATTEMPTS
	RetryBudget          int           // RETRY_BUDGET_PERCENT
	MetricsEnabled       bool          // METRICS_ENABLED
	LogFormat            LogFormat     // LOG_FORMAT
	LogLevel             slog.Level    // LOG_LEVEL: debug, info, warn or error
	RecordFile           string        // RECORD_FILE; empty: no recording
	RecordMax            int64         // RECORD_MAX_MB, in bytes
	PublicURL            *url.URL      // PUBLIC_URL; nil: http:// and the listen address
	BodyBudget           int64         // BODY_BUDGET_MB, in bytes
	UpstreamTimeout      time.Duration // UPSTREAM_TIMEOUT_S
	MaxPendingConns      int           // MAX_PENDING_CONNS
	ShutdownDelay        time.Duration // SHUTDOWN_DELAY_S
	CacheAware           bool          // CACHE_AWARE
	CacheLeaderWait      time.Duration // CACHE_LEADER_WAIT_MS
	ReleaseShortestFirst bool          // RELEASE_SHORTEST_FIRST
	RoutePolicy          RoutePolicy   // ROUTE_POLICY
	TracingEnabled       bool          // TRACING_ENABLED
	GateBackend          GateBackend   // GATE_BACKEND
	RedisURL             string        // REDIS_URL; holds a password, never logged
	RedisTimeout         time.Duration // REDIS_TIMEOUT_MS
	GateLeaseTTL         time.Duration // GATE_LEASE_TTL_S
	GateReplicas         int           // GATE_REPLICAS; 0: counted in Redis

	// Exposure beyond loopback: inbound keys, the admin listener, TLS.
	InboundKeysFile  string         // INBOUND_KEYS_FILE; empty: clients' own keys pass through
	InboundKeysStore bool           // INBOUND_KEYS_STORE: keys and budgets in the spend store, changed live
	UpstreamKeyFile  string         // UPSTREAM_KEY_FILE; empty: ANTHROPIC_API_KEY
	OIDCIssuer       string         // OIDC_ISSUER; empty: no identity-provider tokens
	OIDCAudience     string         // OIDC_AUDIENCE
	OIDCTenantClaim  string         // OIDC_TENANT_CLAIM
	OIDCGroupsClaim  string         // OIDC_GROUPS_CLAIM
	AdminListenAddr  string         // ADMIN_LISTEN_ADDR; empty: /metrics and /ui/ on LISTEN_ADDR
	PprofListenAddr  string         // PPROF_LISTEN_ADDR; empty: no profiling endpoint
	LiveMaxWatchers  int            // LIVE_MAX_WATCHERS
	UIBenchRuns      BenchRuns      // UI_BENCH_RUNS
	TrustedProxies   []netip.Prefix // TRUSTED_PROXIES
	TLSCertFile      string         // TLS_CERT_FILE
	TLSKeyFile       string         // TLS_KEY_FILE

	// Tenants and the fair order.
	GateOrder           GateOrder          // GATE_ORDER
	PriorityStarve      time.Duration      // PRIORITY_STARVE_MS
	TenantFrom          TenantFrom         // TENANT_FROM
	TenantMax           int                // TENANT_MAX
	TenantWeights       map[string]float64 // TENANT_WEIGHTS; nil: every tenant 1
	TenantMaxConcurrent int                // TENANT_MAX_CONCURRENT; 0: no limit
	TenantMaxWaiting    int                // TENANT_MAX_WAITING; 0: no limit

	// The async bulk endpoint (package bulk, docs/bulk.md).
	BulkEnabled       bool          // BULK_ENABLED
	BulkStore         string        // BULK_STORE: "sqlite" or a postgres:// DSN (a secret: never logged)
	DataDir           string        // DATA_DIR
	BulkMaxWait       time.Duration // BULK_MAX_WAIT_S
	BulkMaxRequests   int           // BULK_MAX_BATCH_REQUESTS
	BulkMaxBytes      int64         // BULK_MAX_BATCH_MB, in bytes
	BulkMaxPending    int64         // BULK_MAX_PENDING_MB, in bytes
	BulkRetention     time.Duration // BULK_RETENTION
	BulkPoll          time.Duration // BULK_POLL_MS
	BulkSecret        string        // BULK_SECRET (never logged)
	SpendStore        SpendStore    // SPEND_STORE
	SpendStoreDSN     string        // SPEND_STORE's postgres:// DSN under SpendStorePostgres (a secret: never logged)
	AdminKey          string        // ADMIN_KEY (never logged)
	BudgetWebhookURL  string        // BUDGET_WEBHOOK_URL (may hold a token: never logged)
	BulkWebhookSecret string        // BULK_WEBHOOK_SECRET (never logged)
	// BulkKeyWebhooks is BULK_KEY_WEBHOOKS: each API key's default
	// completion webhook, by the key's short hash (the URLs may hold a
	// token: never logged).
	BulkKeyWebhooks map[string]string

	// Prices is the price table spend is counted by: the list with the
	// config file's [prices] (config/prices.go); nil, the list.
	Prices *price.Table
	// Budgets are the config file's [[budgets]] (config/budgets.go),
	// each checked.
	Budgets []budget.Spec
	// Backends are the config file's [[backends]] (config/backends.go):
	// the upstream keys and backends requests are routed over (see
	// docs/routing.md); nil, the one upstream of UPSTREAM_URL with each
	// client's own key.
	Backends []Backend
	// OIDCGroups are the config file's [[oidc_groups]]
	// (config/oidcgroups.go): what the identity provider's groups may do.
	OIDCGroups []oidcauth.Group
}

// Setting is one row of the configuration table.
type Setting struct {
	Env     string // environment variable
	Flag    string // flag of `sluice serve`, without dashes
	Default string
	Accepts string // what values are accepted, for error messages
	Meaning string
	apply   func(c *Config, v string) error
	// secret keeps the value out of error messages (it may hold a token).
	secret bool
}

// Settings is the table: the single source for parsing, --help and docs.
var Settings = []Setting{
	{Env: "BATCH_ENABLED", Flag: "batch-enabled", Default: "0", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "Master switch. Off keeps the plain realtime path: every request is forwarded at once.",
		apply:   func(c *Config, v string) (err error) { c.Enabled, err = parseBool(v); return }},
	{Env: "BATCH_MAX_SIZE", Flag: "batch-max-size", Default: "16", Accepts: "a whole number >= 1",
		Meaning: "Flush once the window holds this many requests.",
		apply:   func(c *Config, v string) (err error) { c.MaxSize, err = parseInt(v, 1); return }},
	{Env: "BATCH_MAX_WAIT_MS", Flag: "batch-max-wait-ms", Default: "20", Accepts: "whole milliseconds >= 0",
		Meaning: "Max wait for a window to fill, counted from its first request, before flushing.",
		apply:   wholeUnits(time.Millisecond, 0, func(c *Config) *time.Duration { return &c.MaxWait })},
	{Env: "BATCH_IDLE_RELEASE", Flag: "batch-idle-release", Default: "1", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "Close a window at once, without waiting out BATCH_MAX_WAIT_MS, when its requests would all find free slots with nobody ahead of them and no rate-limit hold: under light load the window then costs nothing. Off: every window waits out BATCH_MAX_WAIT_MS or fills.",
		apply:   func(c *Config, v string) (err error) { c.IdleRelease, err = parseBool(v); return }},
	{Env: "RATE_LIMIT_PACING", Flag: "rate-limit-pacing", Default: "buckets", Accepts: "buckets, reset or off",
		Meaning: "On the windowed path, how sluice keeps within the upstream's rate limits. buckets: a model of each upstream key's token buckets, learned from the anthropic-ratelimit-* headers and debited by each request's estimated cost, holds a key's requests outside the gate until their cost fits, so other keys are never held and an exhausted bucket holds only as long as it takes to refill by one request. reset: the old global hold, every granted request waits until an exhausted limit's reset. off: no pacing; 429s reach the retries.",
		apply:   set(pacings, func(c *Config) *Pacing { return &c.RateLimitPacing })},
	{Env: "BATCH_MAX_CONCURRENCY", Flag: "batch-max-concurrency", Default: "8", Accepts: "a whole number >= 1",
		Meaning: "Max simultaneous in-flight upstream calls (the gate's slots).",
		apply:   func(c *Config, v string) (err error) { c.MaxConcurrency, err = parseInt(v, 1); return }},
	{Env: "GATE_LIMIT", Flag: "gate-limit", Default: "static", Accepts: "static or adaptive",
		Meaning: "How many slots the gate has: static, always BATCH_MAX_CONCURRENCY; adaptive, as many as the upstream carries without slowing its first tokens or answering 529, learned from every answer, between GATE_LIMIT_FLOOR and BATCH_MAX_CONCURRENCY (docs/why.md, capacity-shift).",
		apply:   set(gateLimits, func(c *Config) *GateLimit { return &c.GateLimit })},
	{Env: "GATE_LIMIT_FLOOR", Flag: "gate-limit-floor", Default: "2", Accepts: "a whole number >= 1",
		Meaning: "With GATE_LIMIT=adaptive, the fewest slots the gate keeps however the upstream answers, at most BATCH_MAX_CONCURRENCY (a floor above it is refused at start); the limit starts at BATCH_MAX_CONCURRENCY and learns down.",
		apply:   func(c *Config, v string) (err error) { c.GateLimitFloor, err = parseInt(v, 1); return }},
	{Env: "BATCH_TIMEOUT_S", Flag: "batch-timeout-s", Default: "60", Accepts: "whole seconds >= 1",
		Meaning: "Hard ceiling on one window's dispatch: slot wait plus upstream call, counted from the flush.",
		apply:   wholeUnits(time.Second, 1, func(c *Config) *time.Duration { return &c.Timeout })},
	{Env: "LISTEN_ADDR", Flag: "listen", Default: "127.0.0.1:8080", Accepts: "host:port",
		Meaning: "Address sluice listens on.",
		apply:   parseListen},
	{Env: "UPSTREAM_URL", Flag: "upstream", Default: "https://api.anthropic.com", Accepts: "an http:// or https:// URL",
		Meaning: "The Anthropic API (or the simulator) that sluice forwards to.",
		apply:   parseUpstream},
	{Env: "STREAM_IDLE_TIMEOUT_S", Flag: "stream-idle-timeout-s", Default: "60", Accepts: "whole seconds >= 1",
		Meaning: "A stream silent this long, or sending nothing but ping events (which the API sends to keep a connection open), is ended with an in-band timeout_error event and its slot released.",
		apply:   wholeUnits(time.Second, 1, func(c *Config) *time.Duration { return &c.StreamIdleTimeout })},
	{Env: "STREAM_CLIENT_STALL_S", Flag: "stream-client-stall-s", Default: "10", Accepts: "whole seconds >= 0",
		Meaning: "A stream's client that takes no bytes for this long while the upstream waits on it (sluice's 1 MB buffer for the stream is full) is cut and its slot given back, within 1.25 times this. A client that reads at any pace is never cut so. 0: only STREAM_IDLE_TIMEOUT_S applies.",
		apply:   wholeUnits(time.Second, 0, func(c *Config) *time.Duration { return &c.StreamClientStall })},
	{Env: "DRAIN_TIMEOUT_S", Flag: "drain-timeout-s", Default: "30", Accepts: "whole seconds >= 0",
		Meaning: "On SIGINT/SIGTERM, how long in-flight requests may take to finish before sluice exits.",
		apply:   wholeUnits(time.Second, 0, func(c *Config) *time.Duration { return &c.DrainTimeout })},
	{Env: "UI_ENABLED", Flag: "ui-enabled", Default: "1", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "Serve the page at /ui/ (replay and live view) and its endpoints under /ui/api/. Off: /ui/ goes to the proxy like any other path.",
		apply:   func(c *Config, v string) (err error) { c.UIEnabled, err = parseBool(v); return }},
	{Env: "BATCH_MAX_QUEUE", Flag: "batch-max-queue", Default: "1024", Accepts: "a whole number >= 1",
		Meaning: "Max requests waiting, in open windows or for a slot. Past it sluice answers 429 rate_limit_error at once, with a retry-after of the time the requests waiting now will take to drain (1 to 60 s).",
		apply:   func(c *Config, v string) (err error) { c.MaxQueue, err = parseInt(v, 1); return }},
	{Env: "ADMIT_BY_CLIENT_TIMEOUT", Flag: "admit-by-client-timeout", Default: "1", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "Shed a windowed request at once with 429 and retry-after when its expected wait for a slot plus the average call time exceeds the timeout its SDK sent in x-stainless-timeout.",
		apply:   func(c *Config, v string) (err error) { c.AdmitByClientTimeout, err = parseBool(v); return }},
	{Env: "GATE_ORDER", Flag: "gate-order", Default: "fair", Accepts: "fair or fifo",
		Meaning: "The order of the gate's line. fair: slots are shared across tenants (see TENANT_FROM) by weighted fair queueing on cost (max_tokens plus the estimated input), each tenant's requests in arrival order, interactive before batch; with one tenant it is FIFO. fifo: one line for everyone, in arrival order.",
		apply:   set(gateOrders, func(c *Config) *GateOrder { return &c.GateOrder })},
	{Env: "PRIORITY_STARVE_MS", Flag: "priority-starve-ms", Default: "5000", Accepts: "whole milliseconds >= 0",
		Meaning: "Under GATE_ORDER=fair, the longest the oldest batch request (x-sluice-priority: batch, or an inbound key of class batch) waits while interactive ones are served before the next slot goes to batch. 0: batch waits as long as interactive requests do.",
		apply:   wholeUnits(time.Millisecond, 0, func(c *Config) *time.Duration { return &c.PriorityStarve })},
	{Env: "TENANT_FROM", Flag: "tenant-from", Default: "key", Accepts: "key, header, metadata, inbound, session or gateway",
		Meaning: "What names a request's tenant: key, a short hash of the API key it brings (never the key), or with INBOUND_KEYS_FILE its sluice key's tenant; header, its x-sluice-tenant header; metadata, its body's metadata.user_id; inbound, its inbound sluice key's tenant; session, Claude Code's session (its X-Claude-Code-Session-Id header, else the session_id in metadata.user_id), so that each agent of a fleet on one key gets a fair share (with INBOUND_KEYS_FILE the inbound key's tenant still holds); gateway, the developer Anthropic's gateway (claude gateway, with forward_user_identity) signed in, from its x-claude-gateway-user-email header, else x-claude-gateway-user-id: sluice trusts those headers from whoever sends them, so only the gateway must reach it (give the gateway a sluice key as its upstream api_key; not with OIDC_ISSUER; docs/claude-code.md). A request without the header, user_id, session or inbound key is its key's tenant (under gateway, its inbound key's tenant). With INBOUND_KEYS_FILE and header, metadata or gateway, a key's max_concurrent and max_waiting still bind the key as a whole, whatever tenants its requests name (its requests then share one place in the fair order, in arrival order). The tenant orders and counts; it never decides what a request may do.",
		apply:   set(tenantFroms, func(c *Config) *TenantFrom { return &c.TenantFrom })},
	{Env: "TENANT_MAX", Flag: "tenant-max", Default: "100", Accepts: "a whole number >= 1",
		Meaning: "Distinct tenants tracked at once, in the fair order, the per-tenant limits and the metrics' labels; a new tenant past it takes the place of an idle one, or, when none is idle, shares the tenant other.",
		apply:   func(c *Config, v string) (err error) { c.TenantMax, err = parseInt(v, 1); return }},
	{Env: "TENANT_WEIGHTS", Flag: "tenant-weights", Default: "", Accepts: "empty, or tenant=weight pairs separated by commas, each weight a number > 0",
		Meaning: "Tenants' shares of the slots under GATE_ORDER=fair, such as team-a=3,team-b=1; a tenant not named has 1.",
		apply:   parseWeights},
	{Env: "TENANT_MAX_CONCURRENT", Flag: "tenant-max-concurrent", Default: "0", Accepts: "a whole number >= 0",
		Meaning: "Max upstream calls in flight for one tenant (GATE_ORDER=fair only); its further requests wait while others take the free slots. 0: no limit.",
		apply:   func(c *Config, v string) (err error) { c.TenantMaxConcurrent, err = parseInt(v, 0); return }},
	{Env: "TENANT_MAX_WAITING", Flag: "tenant-max-waiting", Default: "0", Accepts: "a whole number >= 0",
		Meaning: "Max requests waiting (in windows or for a slot) for one tenant; past it that tenant's requests, and only its, are answered 429 rate_limit_error with retry-after. 0: no limit but BATCH_MAX_QUEUE.",
		apply:   func(c *Config, v string) (err error) { c.TenantMaxWaiting, err = parseInt(v, 0); return }},
	{Env: "RETRY_MAX_ATTEMPTS", Flag: "retry-max-attempts", Default: "3", Accepts: "a whole number >= 1",
		Meaning: "Attempts per windowed request, the first included, on 429, 5xx, 529 or a failed connection before anything reached the client. 1 turns retries off.",
		apply:   func(c *Config, v string) (err error) { c.RetryMaxAttempts, err = parseInt(v, 1); return }},
	{Env: "RETRY_BUDGET_PERCENT", Flag: "retry-budget-percent", Default: "20", Accepts: "a whole number from 0 to 1000",
		Meaning: "Retries allowed per 100 requests over the last 10 s (never fewer than 10 retries/s), so retries cannot amplify an outage.",
		apply: func(c *Config, v string) error {
			n, err := parseInt(v, 0)
			if err == nil && n > 1000 {
				err = errors.New("must be at most 1000")
			}
			c.RetryBudget = n
			return err
		}},
	{Env: "METRICS_ENABLED", Flag: "metrics-enabled", Default: "1", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "Serve Prometheus metrics at GET /metrics (see docs/metrics.md).",
		apply:   func(c *Config, v string) (err error) { c.MetricsEnabled, err = parseBool(v); return }},
	{Env: "LOG_FORMAT", Flag: "log-format", Default: "text", Accepts: "text or json",
		Meaning: "Log format on stderr: one access line per request, never a key, token or body.",
		apply:   set(logFormats, func(c *Config) *LogFormat { return &c.LogFormat })},
	{Env: "LOG_LEVEL", Flag: "log-level", Default: "info", Accepts: "debug, info, warn or error",
		Meaning: "Least severe log level written; warn drops the access lines.",
		apply:   func(c *Config, v string) (err error) { c.LogLevel, err = parseLogLevel(v); return }},
	{Env: "RECORD_FILE", Flag: "record-file", Default: "", Accepts: "a file path, or empty",
		Meaning: "Record the shape of every Messages request to this file (JSON lines), for `sluice bench --replay` to show what windowing would save on your own traffic: arrival, salted hashes of tenant and key, model, stream, max_tokens, each prompt block's tokens, salted hash and cache_control, the answer's status, rate limits and usage; never text, keys or bodies (docs/replay.md). An existing recording there is continued. Empty: no recording.",
		apply:   func(c *Config, v string) error { c.RecordFile = v; return nil }},
	{Env: "RECORD_MAX_MB", Flag: "record-max-mb", Default: "256", Accepts: "whole megabytes >= 1",
		Meaning: "Disk bound of RECORD_FILE: when it reaches half of this it becomes RECORD_FILE.1 (replacing the older one) and a new part begins.",
		apply: func(c *Config, v string) error {
			n, err := parseInt(v, 1)
			c.RecordMax = int64(n) << 20
			return err
		}},
	{Env: "PUBLIC_URL", Flag: "public-url", Default: "", Accepts: "an http:// or https:// URL, or empty",
		Meaning: "The URL clients reach sluice at, written into each batch's results_url. Empty: http:// and the listen address. Never taken from a request's Host header.",
		apply:   parsePublicURL},
	{Env: "BODY_BUDGET_MB", Flag: "body-budget-mb", Default: "256", Accepts: "whole megabytes >= 1",
		Meaning: "Memory for the Messages request bodies held at once (waiting or in flight). A request whose body would pass it is answered 429 rate_limit_error with retry-after before its body is read.",
		apply: func(c *Config, v string) error {
			n, err := parseInt(v, 1)
			c.BodyBudget = int64(n) << 20
			return err
		}},
	{Env: "UPSTREAM_TIMEOUT_S", Flag: "upstream-timeout-s", Default: "600", Accepts: "whole seconds >= 1",
		Meaning: "How long the upstream may take to send its response headers, on every path (the SDKs' own default timeout is 600 s; on the windowed path the wave deadline usually comes first); with backends, also the cap of the shorter bound each key learns from its answers (see routing.md). After them a body silent for STREAM_IDLE_TIMEOUT_S is cut.",
		apply:   wholeUnits(time.Second, 1, func(c *Config) *time.Duration { return &c.UpstreamTimeout })},
	{Env: "MAX_PENDING_CONNS", Flag: "max-pending-conns", Default: "4096", Accepts: "a whole number >= 1",
		Meaning: "Max connections that have not yet sent a whole request, headers and body (new ones, and idle keep-alive ones awaiting their next request). A new one past it takes the place of the keep-alive connection idle longest, which is closed; with none idle (all sending slowly) it is answered 429 with retry-after and closed at once. So slow or idle clients cannot use up file descriptors, and idle ones cannot lock new clients out. Capped to fit the process's file limit (RLIMIT_NOFILE), with descriptors kept for the admin listener, upstream connections and requests being served.",
		apply:   func(c *Config, v string) (err error) { c.MaxPendingConns, err = parseInt(v, 1); return }},
	{Env: "SHUTDOWN_DELAY_S", Flag: "shutdown-delay-s", Default: "0", Accepts: "whole seconds >= 0",
		Meaning: "On SIGINT/SIGTERM, how long sluice goes on serving, with GET /readyz answering 503, before it stops accepting and the drain begins; behind a load balancer, set it to the time its readiness probe takes to mark sluice down.",
		apply:   wholeUnits(time.Second, 0, func(c *Config) *time.Duration { return &c.ShutdownDelay })},
	{Env: "CACHE_AWARE", Flag: "cache-aware", Default: "1", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "On the windowed path, requests sharing a cached prompt prefix (same model, a cache_control breakpoint at or above the model's minimum cacheable length) pay for it once: the first goes at once and writes the cache, the others wait outside the gate until its response has begun, then read it. Off: every member of a wave goes at once.",
		apply:   func(c *Config, v string) (err error) { c.CacheAware, err = parseBool(v); return }},
	{Env: "CACHE_LEADER_WAIT_MS", Flag: "cache-leader-wait-ms", Default: "5000", Accepts: "whole milliseconds >= 1",
		Meaning: "With CACHE_AWARE, the longest a request waits for the response of the request writing its prefix to begin (about the time to first token of a large uncached prompt); past it, or when less than this is left of its BATCH_TIMEOUT_S or its client's x-stainless-timeout, it goes uncached.",
		apply:   wholeUnits(time.Millisecond, 1, func(c *Config) *time.Duration { return &c.CacheLeaderWait })},
	{Env: "RELEASE_SHORTEST_FIRST", Flag: "release-shortest-first", Default: "0", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "On the windowed path, each wave's members go in line cheapest first (estimated input tokens plus max_tokens; ties in arrival order), so that a wave's short requests do not wait for a slot behind its long ones; a long one waits behind its own wave's shorter ones at most. With CACHE_AWARE it orders the members the cache-aware release lets go together. Off: arrival order.",
		apply:   func(c *Config, v string) (err error) { c.ReleaseShortestFirst, err = parseBool(v); return }},
	{Env: "ROUTE_POLICY", Flag: "route-policy", Default: "affinity", Accepts: "affinity or round-robin",
		Meaning: "How each request's upstream key is chosen when the config file declares [[backends]] (see docs/routing.md): affinity sends it where its prompt prefix is cached or being written, else to its session's key, else to the key whose rate limits take it soonest, least loaded first; round-robin takes the keys in turn (to compare). Without backends it does nothing.",
		apply:   set(routePolicies, func(c *Config) *RoutePolicy { return &c.RoutePolicy })},
	{Env: "TRACING_ENABLED", Flag: "tracing-enabled", Default: "0", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "Send OpenTelemetry traces (a span per request; the window wait, slot wait and each upstream attempt beneath it) over OTLP/HTTP, configured by the standard OTEL_* variables (see docs/tracing.md). Off: no tracing work on the request path.",
		apply:   func(c *Config, v string) (err error) { c.TracingEnabled, err = parseBool(v); return }},
	{Env: "GATE_BACKEND", Flag: "gate-backend", Default: "local", Accepts: "local or redis",
		Meaning: "Where the gate's BATCH_MAX_CONCURRENCY slots live: local, in this process; redis, shared by every replica on REDIS_URL, granted in arrival order across them (in the fair order across tenants under GATE_ORDER=fair), with the rate-limit buckets of RATE_LIMIT_PACING=buckets and the cache groups of CACHE_AWARE shared too (see docs/scaling.md).",
		apply:   set(gateBackends, func(c *Config) *GateBackend { return &c.GateBackend })},
	{Env: "REDIS_URL", Flag: "redis-url", Default: "", Accepts: "a redis://, rediss:// or unix:// URL, or empty",
		Meaning: "The Redis of GATE_BACKEND=redis, redis://[:password@]host:port[/db]. A password in it never reaches a log, a metric or an error.",
		apply:   parseRedisURL},
	{Env: "REDIS_TIMEOUT_MS", Flag: "redis-timeout-ms", Default: "100", Accepts: "whole milliseconds >= 1",
		Meaning: "With GATE_BACKEND=redis, the longest a request waits on Redis; past it the gate falls back to a local cap of ceil(BATCH_MAX_CONCURRENCY / replicas), the rate-limit buckets to this replica's share of each limit and the cache groups to this replica's own, until Redis answers again.",
		apply:   wholeUnits(time.Millisecond, 1, func(c *Config) *time.Duration { return &c.RedisTimeout })},
	{Env: "GATE_LEASE_TTL_S", Flag: "gate-lease-ttl-s", Default: "5", Accepts: "whole seconds >= 1",
		Meaning: "With GATE_BACKEND=redis, how soon the slots of a replica that died (or lost Redis) come back to the others; heartbeats renew them every quarter of it.",
		apply:   wholeUnits(time.Second, 1, func(c *Config) *time.Duration { return &c.GateLeaseTTL })},
	{Env: "GATE_REPLICAS", Flag: "gate-replicas", Default: "0", Accepts: "a whole number >= 0",
		Meaning: "With GATE_BACKEND=redis, the replicas the fallback cap divides BATCH_MAX_CONCURRENCY by; 0: those last seen alive in Redis.",
		apply:   func(c *Config, v string) (err error) { c.GateReplicas, err = parseInt(v, 0); return }},
	{Env: "INBOUND_KEYS_FILE", Flag: "inbound-keys-file", Default: "", Accepts: "a path to a JSON keys file, or empty",
		Meaning: "Inbound keys: sluice holds the upstream API key (UPSTREAM_KEY_FILE or ANTHROPIC_API_KEY) and clients present sluice keys, stored in this file as SHA-256 hashes (see docs/deploy.md); re-read on SIGHUP. A request without a valid one is answered 401. Empty: each client's own key passes through.",
		apply:   func(c *Config, v string) error { c.InboundKeysFile = v; return nil }},
	{Env: "INBOUND_KEYS_STORE", Flag: "inbound-keys-store", Default: "0", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "Inbound keys and budgets kept in the spend store (SPEND_STORE, which must be sqlite or a postgres:// DSN) and changed live through the admin API or `sluice keys` and `sluice budgets`, on every replica sharing the store within a second (see docs/admin-api.md); beside INBOUND_KEYS_FILE's keys and the config file's budgets, if set. sluice holds the upstream API key (UPSTREAM_KEY_FILE or ANTHROPIC_API_KEY).",
		apply:   func(c *Config, v string) (err error) { c.InboundKeysStore, err = parseBool(v); return }},
	{Env: "UPSTREAM_KEY_FILE", Flag: "upstream-key-file", Default: "", Accepts: "a path, or empty",
		Meaning: "With INBOUND_KEYS_FILE or INBOUND_KEYS_STORE, a file holding the upstream API key sluice sends (re-read on SIGHUP). Empty: the ANTHROPIC_API_KEY environment variable.",
		apply:   func(c *Config, v string) error { c.UpstreamKeyFile = v; return nil }},
	{Env: "OIDC_ISSUER", Flag: "oidc-issuer", Default: "", Accepts: "an https:// issuer URL (http:// on loopback), or empty",
		Meaning: "Identity-provider tokens: sluice holds the upstream API key (UPSTREAM_KEY_FILE or ANTHROPIC_API_KEY) and takes, beside any sluice keys of INBOUND_KEYS_FILE, bearer tokens (JWTs) this OpenID Connect provider issued: signature against its published keys (fetched, and fetched again when it rotates), issuer, OIDC_AUDIENCE, expiry and not-before, each token checked once and remembered until it expires. A provider that cannot be reached does not stop sluice: keys and tokens already checked keep working for their life. The config file's [[oidc_groups]] map groups to what a sluice key carries (see docs/deploy.md). Empty: off.",
		apply:   parseOIDCIssuer},
	{Env: "OIDC_AUDIENCE", Flag: "oidc-audience", Default: "", Accepts: "a client ID, or empty",
		Meaning: "With OIDC_ISSUER, the audience (aud) a token must carry: the client ID of the application registered for sluice at the provider.",
		apply:   func(c *Config, v string) error { c.OIDCAudience = v; return nil }},
	{Env: "OIDC_TENANT_CLAIM", Flag: "oidc-tenant-claim", Default: "email", Accepts: "a claim name",
		Meaning: "With OIDC_ISSUER, the token claim (a string) that names the caller: its tenant in the fair order, budgets and spend. A token without it is refused.",
		apply:   nonEmpty(func(c *Config) *string { return &c.OIDCTenantClaim })},
	{Env: "OIDC_GROUPS_CLAIM", Flag: "oidc-groups-claim", Default: "groups", Accepts: "a claim name",
		Meaning: "With OIDC_ISSUER, the token claim (an array of strings, or one string) listing the caller's groups, which [[oidc_groups]] map.",
		apply:   nonEmpty(func(c *Config) *string { return &c.OIDCGroupsClaim })},
	{Env: "ADMIN_LISTEN_ADDR", Flag: "admin-listen", Default: "", Accepts: "host:port, or empty",
		Meaning: "A second address for /metrics, the page at /ui/ and its live feed, which are then absent (404) from LISTEN_ADDR. Empty: they are served on LISTEN_ADDR.",
		apply: func(c *Config, v string) error {
			if v == "" {
				c.AdminListenAddr = ""
				return nil
			}
			return parseAddr(&c.AdminListenAddr, v)
		}},
	{Env: "PPROF_LISTEN_ADDR", Flag: "pprof-listen", Default: "", Accepts: "a loopback host:port, or empty",
		Meaning: "Serve Go's profiles (/debug/pprof/: CPU, allocations, goroutines) on this loopback address, for finding where sluice spends its time (sluice bench --overhead --profile uses it). Empty: not served.",
		apply:   parsePprofAddr},
	{Env: "LIVE_MAX_WATCHERS", Flag: "live-max-watchers", Default: "64", Accepts: "a whole number >= 1",
		Meaning: "Max open live views of the page at once (each costs sluice CPU); one more is answered 503.",
		apply:   func(c *Config, v string) (err error) { c.LiveMaxWatchers, err = parseInt(v, 1); return }},
	{Env: "UI_BENCH_RUNS", Flag: "ui-bench-runs", Default: "auto", Accepts: "auto, on or off",
		Meaning: "Whether the page may start bench runs on the server (POST /ui/api/run). auto: only when the page is served on a loopback address (ADMIN_LISTEN_ADDR, else LISTEN_ADDR).",
		apply:   set(benchRuns, func(c *Config) *BenchRuns { return &c.UIBenchRuns })},
	{Env: "TRUSTED_PROXIES", Flag: "trusted-proxies", Default: "", Accepts: "comma-separated IP addresses or CIDR prefixes, or empty",
		Meaning: "Peers whose X-Forwarded-* and Forwarded headers are passed on upstream. From any other peer sluice drops them. Empty: trust none.",
		apply:   parseTrustedProxies},
	{Env: "TLS_CERT_FILE", Flag: "tls-cert-file", Default: "", Accepts: "a path to a PEM certificate chain, or empty",
		Meaning: "Serve LISTEN_ADDR over TLS (HTTP/1.1) with this certificate and TLS_KEY_FILE's key, re-read when either file changes or on SIGHUP. Empty: plain HTTP.",
		apply:   func(c *Config, v string) error { c.TLSCertFile = v; return nil }},
	{Env: "TLS_KEY_FILE", Flag: "tls-key-file", Default: "", Accepts: "a path to a PEM private key, or empty",
		Meaning: "The private key of TLS_CERT_FILE; set both or neither.",
		apply:   func(c *Config, v string) error { c.TLSKeyFile = v; return nil }},
	{Env: "BULK_ENABLED", Flag: "bulk-enabled", Default: "0", Accepts: "1/0, true/false, yes/no, on/off",
		Meaning: "Serve the async bulk endpoint, POST /v1/bulk/messages: single Messages requests stored durably, answered 202, sent upstream as Message Batches at half the price (see docs/bulk.md).",
		apply:   func(c *Config, v string) (err error) { c.BulkEnabled, err = parseBool(v); return }},
	{Env: "BULK_STORE", Flag: "bulk-store", Default: "sqlite", Accepts: "sqlite, or a postgres:// or postgresql:// DSN",
		Meaning: "Where bulk requests and results are kept: SQLite in DATA_DIR (one sluice), or PostgreSQL, which several replicas may share (each request is submitted once). The DSN is never logged.",
		apply: func(c *Config, v string) error {
			if v != "sqlite" && !strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://") {
				return errors.New("not sqlite nor a postgres:// DSN")
			}
			c.BulkStore = v
			return nil
		}},
	{Env: "DATA_DIR", Flag: "data-dir", Default: "data", Accepts: "a directory path",
		Meaning: "Directory for sluice's data: the bulk SQLite store and, without BULK_SECRET, the generated key that encrypts stored API keys (bulk.key, mode 0600).",
		apply: func(c *Config, v string) error {
			if v == "" {
				return errors.New("empty")
			}
			c.DataDir = v
			return nil
		}},
	{Env: "SPEND_STORE", Flag: "spend-store", Default: "memory", Accepts: "memory, sqlite, or a postgres:// or postgresql:// DSN",
		Meaning: "Where the spend books are kept (what each tenant, key and model spent, by quarter hour; see docs/spend.md): in memory, from sluice's start; SQLite in DATA_DIR (spend.db), which survives a restart so that budgets hold across it; or PostgreSQL, which several replicas share so that a budget holds across them (each reads the others' spend every second). The DSN is never logged.",
		apply: func(c *Config, v string) error {
			if strings.HasPrefix(v, "postgres://") || strings.HasPrefix(v, "postgresql://") {
				c.SpendStore, c.SpendStoreDSN = SpendStorePostgres, v
				return nil
			}
			s, err := spendStores.parse(v)
			if err != nil || s == SpendStorePostgres {
				return errors.New("not memory, sqlite, nor a postgres:// DSN")
			}
			c.SpendStore, c.SpendStoreDSN = s, ""
			return nil
		}, secret: true},
	{Env: "BUDGET_WEBHOOK_URL", Flag: "budget-webhook-url", Default: "", Accepts: "an http:// or https:// URL, or empty",
		Meaning: "Where a JSON event is POSTed when a budget's soft threshold (warn_at) or its limit is first passed in a period (see docs/spend.md). Empty: none; the log line and the metrics stay. The URL may hold a token: never logged.",
		apply: func(c *Config, v string) error {
			if v != "" {
				u, err := url.Parse(v)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return errors.New("not an absolute http:// or https:// URL")
				}
			}
			c.BudgetWebhookURL = v
			return nil
		}, secret: true},
	{Env: "ADMIN_KEY", Flag: "admin-key", Default: "", Accepts: "any text of 16 characters or more, or empty",
		Meaning: "The key the admin API (/admin/spend, /admin/budgets, and with INBOUND_KEYS_STORE /admin/keys and /admin/audit, on ADMIN_LISTEN_ADDR; docs/admin-api.md) asks for, as x-api-key or a bearer token. Empty: the admin API is off. Never logged.",
		apply: func(c *Config, v string) error {
			if v != "" && len(v) < 16 {
				return errors.New("shorter than 16 characters")
			}
			c.AdminKey = v
			return nil
		}, secret: true},
	{Env: "BULK_MAX_WAIT_S", Flag: "bulk-max-wait-s", Default: "300", Accepts: "whole seconds >= 1",
		Meaning: "How long bulk requests of one API key gather, counted from the first, before they go upstream as one Message Batch (sooner at BULK_MAX_BATCH_REQUESTS or BULK_MAX_BATCH_MB).",
		apply:   wholeUnits(time.Second, 1, func(c *Config) *time.Duration { return &c.BulkMaxWait })},
	{Env: "BULK_MAX_BATCH_REQUESTS", Flag: "bulk-max-batch-requests", Default: "100000", Accepts: "a whole number from 1 to 100000",
		Meaning: "Requests per upstream Message Batch at most (the API's limit is 100,000).",
		apply: func(c *Config, v string) error {
			n, err := parseInt(v, 1)
			if err == nil && n > 100_000 {
				err = errors.New("must be at most 100000, the Batches API's limit")
			}
			c.BulkMaxRequests = n
			return err
		}},
	{Env: "BULK_MAX_BATCH_MB", Flag: "bulk-max-batch-mb", Default: "240", Accepts: "whole megabytes from 1 to 250",
		Meaning: "Bytes of request bodies per upstream Message Batch at most (the API's limit is 256 MB, less room for the batch's own JSON).",
		apply: func(c *Config, v string) error {
			n, err := parseInt(v, 1)
			if err == nil && n > 250 {
				err = errors.New("must be at most 250, under the Batches API's 256 MB")
			}
			c.BulkMaxBytes = int64(n) << 20
			return err
		}},
	{Env: "BULK_MAX_PENDING_MB", Flag: "bulk-max-pending-mb", Default: "1024", Accepts: "whole megabytes >= 1",
		Meaning: "Bytes of bulk submissions one API key may have stored that have not ended (queued or in a batch in progress), counted in BULK_STORE so it holds across restarts and replicas; past it a submission is answered 429 rate_limit_error (retry-after 60) until some end. The default is four full batches.",
		apply: func(c *Config, v string) error {
			n, err := parseInt(v, 1)
			c.BulkMaxPending = int64(n) << 20
			return err
		}},
	{Env: "BULK_RETENTION", Flag: "bulk-retention", Default: "29d", Accepts: "a duration: 29d, 36h, 90m",
		Meaning: "How long bulk results stay readable after they arrive (the Batches API keeps results 29 days); then they are deleted.",
		apply: func(c *Config, v string) error {
			d, err := parseDays(v)
			c.BulkRetention = d
			return err
		}},
	{Env: "BULK_POLL_MS", Flag: "bulk-poll-ms", Default: "30000", Accepts: "whole milliseconds >= 100",
		Meaning: "How often bulk batches in progress are polled upstream, lost creates reconciled and webhooks retried.",
		apply:   wholeUnits(time.Millisecond, 100, func(c *Config) *time.Duration { return &c.BulkPoll })},
	{Env: "BULK_SECRET", Flag: "bulk-secret", Default: "", Accepts: "any text, or empty",
		Meaning: "Secret the key that encrypts stored API keys (AES-256-GCM) is derived from; replicas sharing a BULK_STORE need the same one. Empty: a random key generated into DATA_DIR/bulk.key. Never logged.",
		apply:   func(c *Config, v string) error { c.BulkSecret = v; return nil }},
	{Env: "BULK_WEBHOOK_SECRET", Flag: "bulk-webhook-secret", Default: "", Accepts: "any text, or empty",
		Meaning: "Key of the HMAC-SHA256 signature on bulk webhook deliveries (Sluice-Webhook-Signature). Empty: submissions asking for a webhook are refused. Never logged.",
		apply:   func(c *Config, v string) error { c.BulkWebhookSecret = v; return nil }},
	{Env: "BULK_KEY_WEBHOOKS", Flag: "bulk-key-webhooks", Default: "", Accepts: "HASH=URL pairs, separated by commas or spaces, or empty",
		Meaning: "Each API key's default bulk completion webhook, by the key's short hash as the page shows it (32 hex digits); a submission's own Sluice-Webhook-Url wins. Needs BULK_WEBHOOK_SECRET. The URLs are never logged.",
		apply:   func(c *Config, v string) (err error) { c.BulkKeyWebhooks, err = parseKeyWebhooks(v); return }, secret: true},
}
