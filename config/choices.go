package config

import (
	"errors"
	"log/slog"
	"strings"
)

// The settings that choose one of a few words are typed: each has a
// parse (the words as its setting accepts them, in any case) and a
// String (the word), and the zero value is the setting's default, so
// that nothing past this file compares the words themselves.

// Pacing is RATE_LIMIT_PACING: how the windowed path keeps within the
// upstream's rate limits.
type Pacing uint8

const (
	PacingBuckets Pacing = iota // a model of each upstream key's buckets (the default)
	PacingReset                 // the global hold until an exhausted limit's reset
	PacingOff                   // none: 429s reach the retries
)

var pacings = choice[Pacing]{"buckets", "reset", "off"}

func (v Pacing) String() string { return pacings.name(v) }

// ParsePacing reads a RATE_LIMIT_PACING word.
func ParsePacing(s string) (Pacing, error) { return pacings.parse(s) }

// GateLimit is GATE_LIMIT: how many slots the gate has.
type GateLimit uint8

const (
	GateLimitStatic   GateLimit = iota // always BATCH_MAX_CONCURRENCY (the default)
	GateLimitAdaptive                  // learned, between GATE_LIMIT_FLOOR and BATCH_MAX_CONCURRENCY
)

var gateLimits = choice[GateLimit]{"static", "adaptive"}

func (v GateLimit) String() string { return gateLimits.name(v) }

// ParseGateLimit reads a GATE_LIMIT word.
func ParseGateLimit(s string) (GateLimit, error) { return gateLimits.parse(s) }

// GateOrder is GATE_ORDER: the order of the gate's line.
type GateOrder uint8

const (
	GateOrderFair GateOrder = iota // shared across tenants (the default)
	GateOrderFIFO                  // one line for everyone
)

var gateOrders = choice[GateOrder]{"fair", "fifo"}

func (v GateOrder) String() string { return gateOrders.name(v) }

// ParseGateOrder reads a GATE_ORDER word.
func ParseGateOrder(s string) (GateOrder, error) { return gateOrders.parse(s) }

// GateBackend is GATE_BACKEND: where the gate's slots live.
type GateBackend uint8

const (
	GateLocal GateBackend = iota // in this process (the default)
	GateRedis                    // shared by every replica on REDIS_URL
)

var gateBackends = choice[GateBackend]{"local", "redis"}

func (v GateBackend) String() string { return gateBackends.name(v) }

// ParseGateBackend reads a GATE_BACKEND word.
func ParseGateBackend(s string) (GateBackend, error) { return gateBackends.parse(s) }

// TenantFrom is TENANT_FROM: what names a request's tenant. Its words
// are the tenant policy's (tenants.Config.From).
type TenantFrom uint8

const (
	TenantFromKey      TenantFrom = iota // the credential's short hash (the default)
	TenantFromHeader                     // x-sluice-tenant
	TenantFromMetadata                   // metadata.user_id
	TenantFromInbound                    // the inbound sluice key's tenant
	TenantFromSession                    // Claude Code's session
	TenantFromGateway                    // the developer Anthropic's gateway signed in
)

var tenantFroms = choice[TenantFrom]{"key", "header", "metadata", "inbound", "session", "gateway"}

func (v TenantFrom) String() string { return tenantFroms.name(v) }

// ParseTenantFrom reads a TENANT_FROM word.
func ParseTenantFrom(s string) (TenantFrom, error) { return tenantFroms.parse(s) }

// ClientNames tells whether the client names each request's tenant (a
// header, or the body's metadata), rather than its credential. Under
// gateway the client is Anthropic's gateway, naming the developer it
// signed in for each request.
func (v TenantFrom) ClientNames() bool {
	return v == TenantFromHeader || v == TenantFromMetadata || v == TenantFromGateway
}

// LogFormat is LOG_FORMAT.
type LogFormat uint8

const (
	LogText LogFormat = iota // the default
	LogJSON
)

var logFormats = choice[LogFormat]{"text", "json"}

func (v LogFormat) String() string { return logFormats.name(v) }

// ParseLogFormat reads a LOG_FORMAT word.
func ParseLogFormat(s string) (LogFormat, error) { return logFormats.parse(s) }

// logLevels are LOG_LEVEL's words, in slog's order, four apart.
var logLevels = choice[uint8]{"debug", "info", "warn", "error"}

// parseLogLevel reads a LOG_LEVEL word as the slog level it names.
func parseLogLevel(s string) (slog.Level, error) {
	i, err := logLevels.parse(s)
	return slog.LevelDebug + 4*slog.Level(i), err
}

// BenchRuns is UI_BENCH_RUNS: whether the page may start bench runs.
type BenchRuns uint8

const (
	BenchRunsAuto BenchRuns = iota // only when the page is on loopback (the default)
	BenchRunsOn
	BenchRunsOff
)

var benchRuns = choice[BenchRuns]{"auto", "on", "off"}

func (v BenchRuns) String() string { return benchRuns.name(v) }

// ParseBenchRuns reads a UI_BENCH_RUNS word.
func ParseBenchRuns(s string) (BenchRuns, error) { return benchRuns.parse(s) }

// SpendStore is SPEND_STORE: where the spend books are kept.
type SpendStore uint8

const (
	SpendStoreMemory   SpendStore = iota // in memory, from sluice's start (the default)
	SpendStoreSQLite                     // DATA_DIR/spend.db, across restarts
	SpendStorePostgres                   // PostgreSQL by DSN (Config.SpendStoreDSN), shared by replicas
)

// spendStores are the words; SpendStorePostgres is given by its DSN.
var spendStores = choice[SpendStore]{"memory", "sqlite", "postgres"}

func (v SpendStore) String() string { return spendStores.name(v) }

// choice is a setting's words, in the order of its type's values.
type choice[T ~uint8] []string

func (c choice[T]) name(v T) string {
	if int(v) < len(c) {
		return c[v]
	}
	return "(" + strings.Join(c, "|") + "?)"
}

// errChoice is a word that is none of a choice's; the setting's error
// says which it accepts.
var errChoice = errors.New("not one of the accepted words")

func (c choice[T]) parse(s string) (T, error) {
	for i, w := range c {
		if strings.EqualFold(s, w) {
			return T(i), nil
		}
	}
	return 0, errChoice
}

// set is the table's apply for a choice: it parses v into the field that
// field picks out of the Config.
func set[T ~uint8](c choice[T], field func(*Config) *T) func(*Config, string) error {
	return func(cfg *Config, v string) (err error) {
		*field(cfg), err = c.parse(v)
		return err
	}
}
