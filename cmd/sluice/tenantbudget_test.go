package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A budget on a tenant that clients name themselves (TENANT_FROM=header,
// metadata, or session without inbound keys) is escaped by naming another
// tenant: `sluice serve` says so at start, with the budgeted tenants and
// what binds a client whatever it names (a budget on its key); with
// TENANT_FROM=key it says nothing.
func TestClientNamedTenantBudgetsWarnedAtStart(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "sluice.toml")
	if err := os.WriteFile(conf, []byte("[[budgets]]\ntenant = \"acme\"\nusd = 1\nperiod = \"day\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for from, warned := range map[string]bool{"header": true, "metadata": true, "session": true, "key": false} {
		p := startBookProcess(t, "sluice-"+from, "http://127.0.0.1:1", []string{"--config", conf}, "TENANT_FROM="+from)
		var log string
		var got bool
		// The log's lines go out together a moment later (package logbuf).
		for end := time.Now().Add(3 * time.Second); !got && time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			p.logMu.Lock()
			log = p.log.String()
			p.logMu.Unlock()
			got = strings.Contains(log, "escapes the tenant's budget") && strings.Contains(log, "budgeted_tenants=acme")
		}
		p.kill()
		if got != warned {
			t.Errorf("TENANT_FROM=%s: warned %v; want %v. Log:\n%s", from, got, warned, log)
		}
	}
}
