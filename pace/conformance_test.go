package pace_test

import (
	"testing"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/pace/pacetest"
)

// TestConformance runs the cases the shared buckets run too
// (redisshare's TestBucketsConformance) on the in-process ones.
func TestConformance(t *testing.T) {
	pacetest.Run(t, func(*testing.T) pacetest.Env { return pacetest.Virtual(&pace.Buckets{}) })
}
