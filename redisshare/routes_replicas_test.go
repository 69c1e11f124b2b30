package redisshare

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/sluicebin"
	"github.com/sluicehq/sluice/sim"
)

// TestTwoReplicasOneKeyLane: two `sluice serve` replicas routing over one
// backend key of max_concurrency 2 keep that key to 2 calls in flight
// together (its lane is shared through Redis, as the gate is), though
// each may have 8 in flight in all; every request is served.
func TestTwoReplicasOneKeyLane(t *testing.T) {
	const lane, n = 2, 16
	srv := redistest.Start(t)
	cfg := sim.DefaultConfig()
	cfg.TTFT, cfg.PerToken, cfg.Jitter = 150*time.Millisecond, 0, 0
	s, up := simUpstream(t, cfg)
	file := filepath.Join(t.TempDir(), "sluice.toml")
	conf := "[[backends]]\nname = \"only\"\nurl = \"" + up.URL + "\"\nkeys = [\"env:SLUICE_TEST_LANE_KEY\"]\nmax_concurrency = " + strconv.Itoa(lane) + "\n"
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	rs := make([]*sluicebin.Replica, 2)
	for i := range rs {
		rs[i] = sluicebin.StartReplica(t, "r"+strconv.Itoa(i), srv.URL, up.URL, 8, "--config="+file,
			"SLUICE_TEST_LANE_KEY=sk-ant-lane-SECRET", "REDIS_TIMEOUT_MS=1000")
	}
	status := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { status[i], _ = post(rs[i%2], small(i)) })
	}
	wg.Wait()
	for i, c := range status {
		if c != http.StatusOK {
			t.Errorf("request %d: status %d", i, c)
		}
	}
	st := s.Stats()
	t.Logf("%d requests over 2 replicas on one key of max_concurrency %d: the upstream's peak in flight %d", n, lane, st.PeakInflight)
	if st.PeakInflight > lane {
		t.Errorf("the upstream had %d calls in flight at once; want at most the key's shared %d", st.PeakInflight, lane)
	}
	if st.PeakInflight < lane {
		t.Errorf("the upstream had at most %d calls in flight; the key's lane of %d was never filled", st.PeakInflight, lane)
	}
}
