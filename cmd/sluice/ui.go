package main

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/web"
	"github.com/sluicehq/sluice/web/benchtrace"
)

// handlers are what newHandler builds: the proxy, what the API port
// serves, and what the admin listener serves (nil without
// ADMIN_LISTEN_ADDR).
type handlers struct {
	proxy *proxy.Proxy
	api   http.Handler
	admin http.Handler
	// flushSpans sends the last spans; call it once the server has drained.
	flushSpans func()
}

// newHandler builds the proxy (with inbound keys, if inbound is not nil)
// and, when UI_ENABLED, the page: in front of the proxy, or on the admin
// listener with ADMIN_LISTEN_ADDR. ctx ends the page's live event streams,
// so that they do not hold up shutdown. With TRACING_ENABLED the proxy
// traces (see startTracing). flushSpans also closes a GATE_BACKEND=redis
// gate, so that this replica leaves the shared gate once it has drained.
func newHandler(ctx context.Context, cfg config.Config, log *slog.Logger, inbound *proxy.Inbound) (*handlers, error) {
	tp, flushSpans, err := startTracing(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	opt := proxy.Options{Logger: log, IdleTimeout: proxy.IdleTimeout, TracerProvider: tp.TracerProvider, Inbound: inbound}
	if inbound != nil { // the keys' own budgets beside the config file's
		cfg.Budgets = append(slices.Clip(cfg.Budgets), inbound.Budgets()...)
	}
	warnClientNamedTenants(log, cfg, inbound != nil)
	parts, shared, closeShared, err := buildParts(cfg, log)
	if err != nil {
		flushSpans()
		return nil, err
	}
	opt.Parts, opt.Collectors = *parts, append(opt.Collectors, shared...)
	flush := flushSpans
	flushSpans = func() { flush(); closeShared() } // and this replica leaves the shared gate
	// One spend ledger: the proxy's answers and the bulk results.
	opt.Spend = proxy.NewSpend(cfg)
	books, stopShare, err := openBooks(ctx, cfg, log, parts.Budgets)
	if err != nil {
		flushSpans()
		return nil, err
	}
	// Told before anything counts in the ledger; the books closed after
	// the drain and the bulk service, so that their last spend is written.
	opt.Spend.Tell(parts.Budgets)
	opt.Spend.Tell(books)
	stopWebhook := parts.Budgets.Notify(cfg.BudgetWebhookURL, nil)
	opt.Books, opt.Collectors = books, append(opt.Collectors, books.Collectors()...)
	stopKeys := func() {}
	if cfg.InboundKeysStore {
		y, err := syncKeys(cfg, log, books, inbound, parts.Budgets)
		if err != nil {
			stopShare()
			books.Close()
			stopWebhook()
			flushSpans()
			return nil, err
		}
		// A change is in force on the replica that made it before its
		// answer; a failed read is the poll's to retry.
		opt.Keys, opt.KeysChanged, stopKeys = books, func() {
			if err := y.Now(ctx); err != nil {
				log.Error("keys store: a change was made, but reading it back failed; the next poll tries again", "err", err)
			}
		}, y.Stop
	}
	closeBooks := flushSpans
	flushSpans = func() { stopKeys(); stopShare(); books.Close(); stopWebhook(); closeBooks() }
	bk, err := startBulk(ctx, cfg, log, opt.Spend, parts.Budgets)
	if err != nil {
		flushSpans()
		return nil, err
	}
	if bk != nil {
		opt.Bulk = bk
		opt.Collectors = append(opt.Collectors, bk.Collectors()...)
		// Stopped after the drain, with the spans: no request is then
		// being stored.
		spans := flushSpans
		flushSpans = func() { bk.Close(); spans() }
	}
	rc, err := openRecorder(cfg, log)
	if err != nil {
		flushSpans()
		return nil, err
	}
	if rc != nil {
		opt.Recorder = rc
		// Closed after the drain, with the spans: the last exchanges are
		// written.
		spans := flushSpans
		flushSpans = func() { rc.Close(); spans() }
	}
	var live *web.Live
	if cfg.UIEnabled {
		live = web.NewLive(nil)
		opt.Observer = live
	}
	p, err := proxy.New(cfg, opt)
	if err != nil {
		flushSpans()
		return nil, err
	}
	hs := &handlers{proxy: p, api: p, flushSpans: flushSpans}
	var ui http.Handler
	if cfg.UIEnabled {
		live.SetGauges(web.GaugesOf(p, cfg))
		wopt := web.Options{Live: live, Context: ctx, Logger: log, MaxWatchers: cfg.LiveMaxWatchers, NoRuns: !benchRuns(cfg), Run: benchtrace.Run}
		if bk != nil {
			wopt.Bulk = bk
		}
		ui = web.New(wopt)
	}
	switch {
	case cfg.AdminListenAddr != "":
		hs.admin = p.AdminHandler(ui)
	case ui != nil:
		hs.api = web.Mount(ui, p)
	}
	return hs, nil
}

// warnClientNamedTenants says at start that a budget on a tenant binds
// nothing a client cannot leave when the client names its own tenant
// (TENANT_FROM=header or metadata; session, unless inbound keys name it):
// a request naming another tenant escapes it. A budget on the client's
// key (key = "...", or in the keys file) binds whatever tenant it names.
func warnClientNamedTenants(log *slog.Logger, cfg config.Config, inbound bool) {
	named := cfg.TenantFrom == config.TenantFromHeader || cfg.TenantFrom == config.TenantFromMetadata ||
		(cfg.TenantFrom == config.TenantFromSession && !inbound)
	if !named {
		return
	}
	var tenants, groups []string
	for _, b := range cfg.Budgets {
		if b.Tenant != "" {
			tenants = append(tenants, b.Tenant)
		}
		if b.Group != "" {
			groups = append(groups, b.Group)
		}
	}
	if len(groups) > 0 {
		// A group budget binds each member by their tenant: one the
		// client names is one more member budget for each name it tries.
		log.Warn("budgets on identity-provider groups bind each member by their tenant: with TENANT_FROM="+cfg.TenantFrom.String()+
			" a signed-in client names its own tenant, and a request naming another starts a budget of its own; keep TENANT_FROM=key (each token's email) for group budgets (docs/spend.md)",
			"tenant_from", cfg.TenantFrom.String(), "budgeted_groups", strings.Join(groups, ","))
	}
	if len(tenants) == 0 {
		return
	}
	log.Warn("budgets on tenants bind only clients that name them: with TENANT_FROM="+cfg.TenantFrom.String()+
		" the client names its own tenant, and a request naming another escapes the tenant's budget; to bind a client whatever tenant it names, budget its key (key = the key's short hash in [[budgets]], or a budget in INBOUND_KEYS_FILE's entry; docs/spend.md)",
		"tenant_from", cfg.TenantFrom.String(), "budgeted_tenants", strings.Join(tenants, ","))
}
