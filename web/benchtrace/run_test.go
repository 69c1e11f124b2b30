package benchtrace

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/web"
)

func TestRunEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, web.Params{Burst: 2, MaxSize: 1, MaxConcurrency: 1, LatencyMS: 10}); err == nil {
		t.Error("a run with a cancelled context returned no error")
	}
}
