package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/statuswriter"
)

// upstreamLog records each upstream call the in-process simulator serves.
type upstreamLog struct {
	start time.Time
	mu    sync.Mutex
	calls map[string]*Interval // by x-bench-attempt
}

func (l *upstreamLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Bench-Attempt")
		if key == "" {
			h.ServeHTTP(w, r)
			return
		}
		// Logged on arrival, so that a client that has read the whole
		// reply before this handler returned still finds its start.
		iv := &Interval{Start: time.Since(l.start), End: -1}
		l.mu.Lock()
		l.calls[key] = iv
		l.mu.Unlock()
		sw := statuswriter.Wrap(w)
		h.ServeHTTP(sw, r)
		end, status := time.Since(l.start), sw.Status()
		if status == 0 {
			status = http.StatusOK
		}
		l.mu.Lock()
		iv.End, iv.Status = end, status
		l.mu.Unlock()
	})
}

// upstreamStats reads the simulator's counters, in-process or over HTTP.
type upstreamStats func() (sim.Stats, error)

// settledStats reads the simulator's counters once no call is left in
// generation (for up to a second): a client may have read a stream's last
// event before the simulator's handler counted the stream's tokens.
func settledStats(stats upstreamStats) (sim.Stats, error) {
	deadline := time.Now().Add(time.Second)
	for {
		st, err := stats()
		if err != nil || st.Inflight == 0 || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func simReset(ctx context.Context, hc *http.Client, base string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/sim/reset", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("reset the upstream simulator: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("reset the upstream simulator: POST /sim/reset answered %s (is --upstream a `sluice sim`?)", resp.Status)
	}
	return nil
}

func simStats(ctx context.Context, hc *http.Client, base string) (sim.Stats, error) {
	var st sim.Stats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/sim/stats", nil)
	if err != nil {
		return st, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return st, fmt.Errorf("read upstream stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("read upstream stats: %w", err)
	}
	return st, nil
}
