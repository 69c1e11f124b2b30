package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

type recordingObserver struct {
	mu    sync.Mutex
	waves []string
	done  []Exchange
}

func (o *recordingObserver) WaveFlushed(id uint64, size int, reason string) {
	o.mu.Lock()
	o.waves = append(o.waves, reason)
	o.mu.Unlock()
}

func (o *recordingObserver) RequestDone(ex Exchange) {
	ex.Request = nil
	o.mu.Lock()
	o.done = append(o.done, ex)
	o.mu.Unlock()
}

func TestObserverHearsWavesAndExchanges(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"type":"message"}`)
	}))
	defer up.Close()
	for _, windowed := range []bool{false, true} {
		obs := &recordingObserver{}
		cfg := config.Default()
		cfg.Enabled, cfg.MaxSize, cfg.MaxConcurrency = windowed, 3, 1
		cfg.IdleRelease = false // three together form one wave, closed by size
		cfg.UpstreamURL = mustURL(t, up.URL)
		p, err := newProxy(t, cfg, Options{Observer: obs, Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(p)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(`{"model":"m"}`))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
		wg.Wait()
		srv.Close()
		p.Close()
		if len(obs.done) != 3 {
			t.Fatalf("windowed=%v: %d exchanges observed; want 3", windowed, len(obs.done))
		}
		var maxWait time.Duration
		for _, ex := range obs.done {
			if ex.Status != 200 || ex.Granted.IsZero() || ex.Released.Before(ex.Granted) || ex.End.Before(ex.Start) {
				t.Errorf("windowed=%v: exchange %+v: want status 200 and start <= granted <= released", windowed, ex)
			}
			maxWait = max(maxWait, ex.QueueWait)
			if windowed && (ex.Wave == 0 || ex.Reason != "size") {
				t.Errorf("exchange in wave %d closed by %q; want a wave closed by size", ex.Wave, ex.Reason)
			}
			if !windowed && ex.Wave != 0 {
				t.Errorf("plain path exchange has wave %d", ex.Wave)
			}
		}
		if windowed {
			if len(obs.waves) != 1 || obs.waves[0] != "size" {
				t.Errorf("waves %v; want one closed by size", obs.waves)
			}
			// One slot: the third waits for two 20 ms calls.
			if maxWait < 35*time.Millisecond {
				t.Errorf("longest queue wait %s with one slot and three 20 ms calls; want >= 35ms", maxWait)
			}
		}
	}
}
