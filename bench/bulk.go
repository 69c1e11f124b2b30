package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/sluicehq/sluice/bulk"
	"github.com/sluicehq/sluice/config"
)

// startBulk starts mode bulk's bulk service on cfg's upstream, as sluice
// serve does with BULK_ENABLED=1, with its SQLite store in a temporary
// DATA_DIR that Close removes. Its settings are cfg's: the scenario's
// bulk_max_wait and bulk_poll over the defaults.
func startBulk(ctx context.Context, cfg config.Config, log *slog.Logger) (*bulkService, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-bulk-")
	if err != nil {
		return nil, fmt.Errorf("bulk mode's data directory: %w", err)
	}
	svc, err := bulk.New(ctx, bulk.Config{DataDir: dir, MaxWait: cfg.BulkMaxWait, MaxRequests: cfg.BulkMaxRequests,
		MaxBytes: cfg.BulkMaxBytes, PollInterval: max(cfg.BulkPoll, 10*time.Millisecond), Upstream: cfg.UpstreamURL, Logger: log})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &bulkService{Service: svc, dir: dir}, nil
}

// bulkService is a bulk.Service whose Close also removes its data.
type bulkService struct {
	*bulk.Service
	dir string
}

func (b *bulkService) Close() {
	b.Service.Close()
	os.RemoveAll(b.dir)
}
