package main

import (
	"context"
	"log/slog"

	"github.com/sluicehq/sluice/bulk"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/spend"
)

// startBulk starts the bulk endpoint's service when BULK_ENABLED; nil when
// it is off.
func startBulk(ctx context.Context, cfg config.Config, log *slog.Logger, sp *spend.Ledger, budgets bulk.Budgets) (*bulk.Service, error) {
	if !cfg.BulkEnabled {
		return nil, nil
	}
	s, err := bulk.New(ctx, bulk.Config{Store: cfg.BulkStore, DataDir: cfg.DataDir, Secret: cfg.BulkSecret, WebhookSecret: cfg.BulkWebhookSecret, KeyWebhooks: cfg.BulkKeyWebhooks,
		MaxWait: cfg.BulkMaxWait, MaxRequests: cfg.BulkMaxRequests, MaxBytes: cfg.BulkMaxBytes, MaxPendingBytes: cfg.BulkMaxPending, Retention: cfg.BulkRetention,
		PollInterval: cfg.BulkPoll, Upstream: cfg.UpstreamURL, Logger: log, Spend: sp, Budgets: budgets})
	if err != nil {
		return nil, err
	}
	log.Info("bulk endpoint on", "path", "/v1/bulk/messages", "store", s.Store().Where(), "max_wait", cfg.BulkMaxWait)
	return s, nil
}
