package config

import (
	"log/slog"
	"strings"
	"testing"
)

// Each typed choice reads back its own words, in any case, and its zero
// value is the setting's default.
func TestChoicesReadTheirWords(t *testing.T) {
	check := func(env, def string, words []string, parse func(string) (string, error)) {
		t.Helper()
		for _, w := range words {
			for _, spelt := range []string{w, strings.ToUpper(w)} {
				if got, err := parse(spelt); err != nil || got != w {
					t.Errorf("%s=%s reads as %q, %v; want %q", env, spelt, got, err, w)
				}
			}
		}
		if _, err := parse("nonsense"); err == nil {
			t.Errorf("%s=nonsense read without an error", env)
		}
		if def != words[0] {
			t.Errorf("%s's zero value is %q; want the default", env, def)
		}
	}
	str := func(s interface{ String() string }, err error) (string, error) { return s.String(), err }
	d := Default()
	check("RATE_LIMIT_PACING", d.RateLimitPacing.String(), []string{"buckets", "reset", "off"}, func(s string) (string, error) { return str(ParsePacing(s)) })
	check("GATE_LIMIT", d.GateLimit.String(), []string{"static", "adaptive"}, func(s string) (string, error) { return str(ParseGateLimit(s)) })
	check("GATE_ORDER", d.GateOrder.String(), []string{"fair", "fifo"}, func(s string) (string, error) { return str(ParseGateOrder(s)) })
	check("GATE_BACKEND", d.GateBackend.String(), []string{"local", "redis"}, func(s string) (string, error) { return str(ParseGateBackend(s)) })
	check("TENANT_FROM", d.TenantFrom.String(), []string{"key", "header", "metadata", "inbound", "session", "gateway"}, func(s string) (string, error) { return str(ParseTenantFrom(s)) })
	check("LOG_FORMAT", d.LogFormat.String(), []string{"text", "json"}, func(s string) (string, error) { return str(ParseLogFormat(s)) })
	check("UI_BENCH_RUNS", d.UIBenchRuns.String(), []string{"auto", "on", "off"}, func(s string) (string, error) { return str(ParseBenchRuns(s)) })
	if (Config{}).RateLimitPacing != d.RateLimitPacing || (Config{}).TenantFrom != d.TenantFrom || (Config{}).GateOrder != d.GateOrder {
		t.Error("a zero Config's choices are not the defaults")
	}
	for word, want := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "WARN": slog.LevelWarn, "error": slog.LevelError} {
		if c, err := Load(nil, env(map[string]string{"LOG_LEVEL": word})); err != nil || c.LogLevel != want {
			t.Errorf("LOG_LEVEL=%s: %v, %v; want %v", word, c.LogLevel, err, want)
		}
	}
	if d.LogLevel != slog.LevelInfo {
		t.Errorf("LOG_LEVEL's default is %v; want info", d.LogLevel)
	}
}

// The settings that are wrong only together are refused by Load, with a
// message naming both.
func TestSettingsWrongTogether(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string // "" : loads
	}{
		{map[string]string{"TLS_CERT_FILE": "c.pem"}, "TLS_KEY_FILE"},
		{map[string]string{"ADMIN_LISTEN_ADDR": "127.0.0.1:8080"}, "ADMIN_LISTEN_ADDR=127.0.0.1:8080 is LISTEN_ADDR"},
		{map[string]string{"GATE_BACKEND": "redis"}, "REDIS_URL"},
		{map[string]string{"BATCH_ENABLED": "1", "GATE_ORDER": "fifo", "TENANT_MAX_CONCURRENT": "2"}, "TENANT_MAX_CONCURRENT needs GATE_ORDER=fair"},
		// The local gate's order is built only when windowing is on.
		{map[string]string{"GATE_ORDER": "fifo", "TENANT_MAX_CONCURRENT": "2"}, ""},
		{map[string]string{"BATCH_ENABLED": "1", "GATE_ORDER": "fair", "TENANT_MAX_CONCURRENT": "2"}, ""},
		{map[string]string{"BATCH_ENABLED": "1", "GATE_LIMIT": "adaptive", "GATE_LIMIT_FLOOR": "9", "BATCH_MAX_CONCURRENCY": "8"}, "GATE_LIMIT_FLOOR=9 is above BATCH_MAX_CONCURRENCY=8"},
		{map[string]string{"BATCH_ENABLED": "1", "GATE_LIMIT": "adaptive", "GATE_LIMIT_FLOOR": "8", "BATCH_MAX_CONCURRENCY": "8"}, ""},
		{map[string]string{"BATCH_ENABLED": "1", "GATE_LIMIT_FLOOR": "9", "BATCH_MAX_CONCURRENCY": "8"}, ""}, // static: no floor to learn from
		{map[string]string{"BULK_ENABLED": "1", "BULK_KEY_WEBHOOKS": "0123456789abcdef0123456789abcdef=http://127.0.0.1:2/"}, "BULK_KEY_WEBHOOKS needs BULK_WEBHOOK_SECRET"},
		// Behind Anthropic's gateway only the gateway may name developers.
		{map[string]string{"TENANT_FROM": "gateway", "OIDC_ISSUER": "https://idp.example.com", "OIDC_AUDIENCE": "sluice"}, "TENANT_FROM=gateway takes each request's developer from headers"},
		{map[string]string{"TENANT_FROM": "gateway"}, ""},
		{map[string]string{"BULK_ENABLED": "1", "BULK_WEBHOOK_SECRET": "s", "BULK_KEY_WEBHOOKS": "0123456789abcdef0123456789abcdef=http://127.0.0.1:2/"}, ""},
	} {
		_, err := Load(nil, env(tc.env))
		if tc.want == "" && err != nil {
			t.Errorf("%v: %v; want it to load", tc.env, err)
		}
		if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: err = %v; want one containing %q", tc.env, err, tc.want)
		}
	}
}

// A Config built in code, not loaded, is held to the bounds the table's
// parses hold.
func TestValidateHoldsTheBoundsOfABuiltConfig(t *testing.T) {
	for name, edit := range map[string]func(*Config){
		"BODY_BUDGET_MB":        func(c *Config) { c.BodyBudget = 0 },
		"UPSTREAM_TIMEOUT_S":    func(c *Config) { c.UpstreamTimeout = 0 },
		"STREAM_IDLE_TIMEOUT_S": func(c *Config) { c.StreamIdleTimeout = -1 },
	} {
		c := Default()
		edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s out of bounds: err = %v; want one naming it", name, err)
		}
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
}

// Inbound keys with no key would refuse everyone: harmless on loopback
// (keys can be added and reloaded), a sign of a mistake beyond it.
func TestInboundKeysWithNoKeyRefuseToStartBeyondLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:8080": true, "0.0.0.0:8080": false, ":8080": false, "192.0.2.7:8080": false} {
		c := Default()
		c.ListenAddr = addr
		err := c.ValidateInboundKeys(0)
		if ok && err != nil {
			t.Errorf("LISTEN_ADDR=%s with no inbound key: %v; want it to start", addr, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "INBOUND_KEYS_FILE")) {
			t.Errorf("LISTEN_ADDR=%s with no inbound key: %v; want a refusal naming INBOUND_KEYS_FILE", addr, err)
		}
		if err := c.ValidateInboundKeys(1); err != nil {
			t.Errorf("LISTEN_ADDR=%s with a key: %v", addr, err)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:1": true, "[::1]:8080": true, "localhost:8080": true, "LOCALHOST:1": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "sluice.example:443": false, "bad": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v; want %v", addr, got, want)
		}
	}
}

// INBOUND_KEYS_STORE keeps keys in the spend store: in memory they would
// be gone at a restart.
func TestInboundKeysStoreNeedsADurableStore(t *testing.T) {
	c := Default()
	c.InboundKeysStore = true
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "SPEND_STORE") {
		t.Errorf("INBOUND_KEYS_STORE=1 with SPEND_STORE=memory: %v, want an error naming SPEND_STORE", err)
	}
	c.SpendStore = SpendStoreSQLite
	if err := c.Validate(); err != nil {
		t.Errorf("INBOUND_KEYS_STORE=1 with SPEND_STORE=sqlite: %v", err)
	}
}
