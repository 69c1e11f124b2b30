package config

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// Validate checks what no single setting's parse can: the settings that
// are only wrong together, and, for a Config built in code rather than
// loaded, the bounds the table's parses hold. Load validates what it
// returns; whatever builds sluice's parts from a Config validates it
// first.
func (c Config) Validate() error {
	switch {
	case c.BodyBudget <= 0:
		return errors.New("BODY_BUDGET_MB must be positive")
	case c.UpstreamTimeout <= 0:
		return errors.New("UPSTREAM_TIMEOUT_S must be positive")
	case c.StreamIdleTimeout <= 0:
		return errors.New("STREAM_IDLE_TIMEOUT_S must be positive")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return errors.New("TLS_CERT_FILE and TLS_KEY_FILE go together: set both, or neither for plain HTTP")
	}
	if c.AdminListenAddr != "" && c.AdminListenAddr == c.ListenAddr && !strings.HasSuffix(c.ListenAddr, ":0") { // :0 picks two ports
		return fmt.Errorf("ADMIN_LISTEN_ADDR=%s is LISTEN_ADDR: give the admin listener an address of its own, or leave it empty", c.AdminListenAddr)
	}
	if c.AdminKey != "" && c.AdminListenAddr == "" {
		return errors.New("ADMIN_KEY is set and ADMIN_LISTEN_ADDR is not: the admin API is served on the admin listener only, never on the API port; set ADMIN_LISTEN_ADDR (127.0.0.1:9091, say)")
	}
	if c.InboundKeysStore && c.SpendStore == SpendStoreMemory {
		return errors.New("INBOUND_KEYS_STORE=1 keeps the keys and budgets in the spend store, which must outlive sluice: set SPEND_STORE=sqlite (one replica) or SPEND_STORE=postgres://... (replicas sharing them)")
	}
	if c.GateBackend == GateRedis && c.RedisURL == "" {
		return errors.New("GATE_BACKEND=redis needs REDIS_URL (redis://host:port)")
	}
	// A shared gate's own order takes the limit or not; the local one
	// is built only when windowing is on.
	if c.Enabled && c.GateBackend == GateLocal && c.GateOrder == GateOrderFIFO && c.TenantMaxConcurrent > 0 {
		return errors.New("TENANT_MAX_CONCURRENT needs GATE_ORDER=fair: one FIFO line cannot let other tenants past a tenant at its limit")
	}
	if c.Enabled && c.GateLimit == GateLimitAdaptive && c.GateLimitFloor > c.MaxConcurrency {
		return fmt.Errorf("GATE_LIMIT_FLOOR=%d is above BATCH_MAX_CONCURRENCY=%d: the adaptive limit learns between the two; lower the floor, or raise the cap", c.GateLimitFloor, c.MaxConcurrency)
	}
	if err := c.validateOIDC(); err != nil {
		return err
	}
	if c.TenantFrom == TenantFromGateway && c.OIDCIssuer != "" {
		// Whoever reaches sluice can name a developer under gateway:
		// every person with an identity-provider token could.
		return errors.New("TENANT_FROM=gateway takes each request's developer from headers its caller sends, so only Anthropic's gateway may reach sluice; with OIDC_ISSUER every person with an identity-provider token could, and name another developer. Run the sluice behind the gateway without OIDC_ISSUER (the gateway signs developers in), and another for tokens")
	}
	if c.BulkEnabled && len(c.BulkKeyWebhooks) > 0 && c.BulkWebhookSecret == "" {
		return errors.New("BULK_KEY_WEBHOOKS needs BULK_WEBHOOK_SECRET to sign the deliveries with; set one")
	}
	return nil
}

// ValidateInboundKeys checks the inbound keys loaded from
// INBOUND_KEYS_FILE, keys of them, against the listen address: a file
// with no key refuses everyone, harmless on loopback (keys can be added
// and reloaded), a sign of a mistake beyond it, unless identity-provider
// tokens are taken (OIDC_ISSUER).
func (c Config) ValidateInboundKeys(keys int) error {
	if keys == 0 && c.OIDCIssuer == "" && !IsLoopback(c.ListenAddr) {
		return fmt.Errorf("INBOUND_KEYS_FILE holds no key, and LISTEN_ADDR=%s is not a loopback address: add a key to the file, or listen on 127.0.0.1", c.ListenAddr)
	}
	return nil
}

// IsLoopback reports whether addr (host:port) is reachable from this host
// only: a loopback IP or "localhost". An empty or unspecified host
// (":8080", "0.0.0.0:8080") listens on every interface, so it is not.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return isLoopbackHost(host)
}

// isLoopbackHost reports whether host is "localhost" or a loopback IP.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
