package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
)

// With a client-named tenant a group budget's member could start a
// budget of their own by naming another tenant: sluice serve says so at
// start, naming the budgeted groups; with each token's own tenant it
// says nothing.
func TestWarnsGroupBudgetsUnderClientNamedTenants(t *testing.T) {
	cfg := config.Default()
	cfg.Budgets = []budget.Spec{{Name: "contractors-day", Group: "contractors"}}
	for from, want := range map[config.TenantFrom]bool{config.TenantFromHeader: true, config.TenantFromMetadata: true, config.TenantFromKey: false} {
		var buf bytes.Buffer
		cfg.TenantFrom = from
		warnClientNamedTenants(slog.New(slog.NewTextHandler(&buf, nil)), cfg, true)
		if got := strings.Contains(buf.String(), "budgets on identity-provider groups bind each member by their tenant") && strings.Contains(buf.String(), "budgeted_groups=contractors"); got != want {
			t.Errorf("TENANT_FROM=%s: warned %v, want %v:\n%s", from, got, want, buf.String())
		}
	}
}
