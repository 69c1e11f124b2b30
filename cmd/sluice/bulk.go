package main

import (
	"context"
	"log/slog"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/bulk"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/spend"
	"github.com/sluicehq/sluice/spendstore"
)

// startBulk starts the bulk endpoint's service when BULK_ENABLED; nil when
// it is off.
func startBulk(ctx context.Context, cfg config.Config, log *slog.Logger, sp *spend.Ledger, budgets bulk.Budgets) (*bulk.Service, error) {
	if !cfg.BulkEnabled {
		return nil, nil
	}
	s, err := bulk.New(ctx, bulk.Config{Store: cfg.BulkStore, DataDir: cfg.DataDir, Secret: cfg.BulkSecret, WebhookSecret: cfg.BulkWebhookSecret, KeyWebhooks: cfg.BulkKeyWebhooks,
		MaxWait: cfg.BulkMaxWait, MaxRequests: cfg.BulkMaxRequests, MaxBytes: cfg.BulkMaxBytes, MaxPendingBytes: cfg.BulkMaxPending, Retention: cfg.BulkRetention,
		PollInterval: cfg.BulkPoll, Upstream: cfg.BulkUpstream(), Logger: log, Spend: sp, Budgets: budgets})
	if err != nil {
		return nil, err
	}
	log.Info("bulk endpoint on", "path", "/v1/bulk/messages", "store", s.Store().Where(), "max_wait", cfg.BulkMaxWait)
	return s, nil
}

// openBooks opens the spend books (SPEND_STORE). With books of its own
// it starts each budget's period with what the books say was spent in it
// before this start; with books shared by replicas (PostgreSQL) the
// budgets read what the other replicas spent, now and every
// budget.RefreshEvery, until stop.
func openBooks(ctx context.Context, cfg config.Config, log *slog.Logger, budgets *budget.Set) (books *spendstore.Store, stop func(), err error) {
	if cfg.SpendStore == config.SpendStorePostgres {
		books, err = spendstore.OpenPostgres(ctx, cfg.SpendStoreDSN, log)
	} else {
		books, err = spendstore.Open(cfg.SpendStore == config.SpendStoreSQLite, cfg.DataDir, log)
	}
	if err != nil {
		return nil, nil, err
	}
	stop = func() {}
	if books.Shared() {
		stop = budgets.Share(books)
	} else if err := budgets.Load(books); err != nil {
		books.Close()
		return nil, nil, err
	}
	if books.Durable() {
		log.Info("spend books on", "store", books.Where(), "shared", books.Shared(), "replica", books.Replica())
	}
	return books, stop, nil
}
