package bulk

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAcceptanceRate is the target of docs/benchmarks.md: 100,000 bulk
// submissions accepted by a real `sluice serve` with SQLite and durable
// commits. Long: it runs only with SLUICE_BULK_LOAD=1.
//
//	SLUICE_BULK_LOAD=1 [SLUICE_BULK_WORKERS=16] go test -run TestAcceptanceRate -v ./bulk
func TestAcceptanceRate(t *testing.T) {
	if os.Getenv("SLUICE_BULK_LOAD") == "" {
		t.Skip("a load run: set SLUICE_BULK_LOAD=1")
	}
	n, _ := strconv.Atoi(os.Getenv("SLUICE_BULK_N"))
	if n == 0 {
		n = 100_000
	}
	_, upURL := startSim(t)
	r := startReplica(t, map[string]string{"UPSTREAM_URL": upURL, "BULK_STORE": "sqlite", "DATA_DIR": t.TempDir(),
		"BULK_MAX_WAIT_S": "3600", "BULK_MAX_BATCH_REQUESTS": "100000"})
	workers, _ := strconv.Atoi(os.Getenv("SLUICE_BULK_WORKERS"))
	if workers == 0 {
		workers = 16
	}
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var failed atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				body := msgBody(fmt.Sprintf("classify item %d: the quick brown fox jumps over the lazy dog", i))
				req, _ := http.NewRequest("POST", r.url+"/v1/bulk/messages", strings.NewReader(body))
				req.Header.Set("x-api-key", testKey)
				t0 := time.Now()
				resp, err := client.Do(req)
				lat[i] = time.Since(t0)
				if err != nil || resp.StatusCode != 202 {
					failed.Add(1)
				}
				if resp != nil {
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	rss := ""
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM") || strings.HasPrefix(l, "VmRSS") {
			rss += strings.Join(strings.Fields(l), " ") + "; "
		}
	}
	rate := float64(n) / elapsed.Seconds()
	t.Logf("%d submissions, %d workers: %.0f/s in %v; time to 202 p50 %v p99 %v max %v; sluice %s; failed %d",
		n, workers, rate, elapsed.Round(time.Millisecond), lat[n/2].Round(10*time.Microsecond), lat[n*99/100].Round(10*time.Microsecond), lat[n-1].Round(time.Microsecond), rss, failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d submissions were not accepted", failed.Load())
	}
}
