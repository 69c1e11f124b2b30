package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/spendstore"
)

// booksConfig is sluice in front of up with durable spend books in dir.
func booksConfig(t *testing.T, up, dir string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.UpstreamURL, _ = url.Parse(up)
	cfg.SpendStore, cfg.DataDir = config.SpendStoreSQLite, dir
	return cfg
}

// booksTotal is what the SQLite books in dir hold in all: USD and
// answers.
func booksTotal(t *testing.T, dir string) (usd float64, answers int64) {
	t.Helper()
	books, err := spendstore.Open(true, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer books.Close()
	lines, err := books.Query(context.Background(), spendstore.Filter{Period: "all"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		usd, answers = usd+l.USD, answers+l.Answers
	}
	return usd, answers
}

// sluiceAt serves cfg on a loopback listener; stop drains it as sluice
// serve does (the requests in flight answered, then the books closed).
func sluiceAt(t *testing.T, cfg config.Config) (base string, stop func()) {
	t.Helper()
	hs, err := newHandler(context.Background(), cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(hs.api)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Close()
			// A stream's connection is taken over from net/http (package
			// park), which srv.Close no longer waits for: the proxy's own
			// count of requests being served does, as sluice serve's drain.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := hs.proxy.Idle(ctx); err != nil {
				t.Errorf("requests still being served 30 s into the drain: %v", err)
			}
			hs.proxy.Close()
			hs.flushSpans()
		})
	}
	t.Cleanup(stop)
	return srv.URL, stop
}

// The books survive a restart in the middle of a load: sluice is drained
// and started again on the same DATA_DIR while clients keep sending, JSON
// and streams, and what its books say was spent is what the simulator
// says it served, to the cent. (A request refused while no sluice
// listened never reached the simulator, and is in neither.)
func TestBooksSurviveARestartMidLoad(t *testing.T) {
	s := sim.New(sim.Config{TTFT: time.Millisecond, OutputTokensMin: 50, OutputTokensMax: 400})
	up := httptest.NewServer(s)
	defer func() { up.Close(); s.Close() }()
	dir := t.TempDir()
	var base atomic.Value
	b, stop := sluiceAt(t, booksConfig(t, up.URL, dir))
	base.Store(b)

	var sent, answered atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				stream := (w+i)%2 == 0
				body := `{"model":"claude-opus-4-1","max_tokens":64,"stream":` + map[bool]string{true: "true", false: "false"}[stream] +
					`,"messages":[{"role":"user","content":"question ` + strings.Repeat("x", i%50) + `"}]}`
				req, _ := http.NewRequest(http.MethodPost, base.Load().(string)+"/v1/messages", strings.NewReader(body))
				req.Header.Set("X-Api-Key", "sk-test")
				sent.Add(1)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					time.Sleep(5 * time.Millisecond) // between the two sluices
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					answered.Add(1)
				}
			}
		}()
	}
	waitFor := func(n int64) {
		deadline := time.Now().Add(20 * time.Second)
		for answered.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d answered of %d wanted within 20 s", answered.Load(), n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(40)
	stop() // mid-load: the clients go on sending
	before := answered.Load()
	b, stop = sluiceAt(t, booksConfig(t, up.URL, dir))
	base.Store(b)
	waitFor(before + 40)
	close(done)
	wg.Wait()
	stop()

	usd, answers := booksTotal(t, dir)
	want := s.Stats().CostUSD
	t.Logf("%d answers (%d sent), $%.6f in the books, $%.6f by the simulator", answered.Load(), sent.Load(), usd, want)
	if answers != answered.Load() {
		t.Errorf("the books count %d answers, the clients got %d", answers, answered.Load())
	}
	if math.Abs(usd-want) > 1e-6 || want < 0.01 { // to the micro-dollar, of cents at least
		t.Errorf("the books say $%.6f, the simulator $%.6f", usd, want)
	}
}

// A budget spent before a restart holds after it: the books give each
// budget's period its spend at start.
func TestBudgetHoldsAcrossRestart(t *testing.T) {
	s := sim.New(sim.Config{TTFT: time.Millisecond, OutputTokensMin: 10, OutputTokensMax: 10})
	up := httptest.NewServer(s)
	defer func() { up.Close(); s.Close() }()
	dir := t.TempDir()
	cfg := booksConfig(t, up.URL, dir)
	sp := budget.Spec{Tenant: "acme", Unit: budget.Tokens, Limit: 30, Period: budget.Month}
	if err := sp.Check(); err != nil {
		t.Fatal(err)
	}
	cfg.Budgets = []budget.Spec{sp}
	cfg.TenantFrom = config.TenantFromHeader
	post := func(base string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(`{"model":"claude-haiku-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Api-Key", "sk-test")
		req.Header.Set("X-Sluice-Tenant", "acme")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	base, stop := sluiceAt(t, cfg)
	for post(base) == http.StatusOK {
	}
	stop()
	base, _ = sluiceAt(t, cfg)
	if code := post(base); code != http.StatusPaymentRequired {
		t.Errorf("after the restart the spent budget's tenant got %d, want 402", code)
	}
}

// A key of the keys file may carry its own budget ("budget": {...}, as a
// [[budgets]] table): sluice serve adds it to the config file's, named
// by the key's name, and it binds that key alone.
func TestKeysFileBudget(t *testing.T) {
	entry := func(name, key, extra string) string {
		sum := sha256.Sum256([]byte(key))
		return `{"name":"` + name + `","sha256":"` + hex.EncodeToString(sum[:]) + `"` + extra + `}`
	}
	keys := filepath.Join(t.TempDir(), "keys.json")
	os.WriteFile(keys, []byte(`{"keys":[`+entry("alice", aliceKey, `,"budget":{"tokens":1,"period":"day","time_zone":"Asia/Tokyo"}`)+","+entry("bob", bobKey, "")+`]}`), 0o600)
	t.Setenv("ANTHROPIC_API_KEY", e2eHeldKey)
	ex, err := openExposure(config.Config{InboundKeysFile: keys, ListenAddr: "127.0.0.1:0"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	hs, err := newHandler(context.Background(), withUpstream(t, config.Default(), keys), slog.New(slog.DiscardHandler), ex.inbound)
	if err != nil {
		t.Fatal(err)
	}
	defer hs.flushSpans()
	defer hs.proxy.Close()
	srv := httptest.NewServer(hs.api)
	defer srv.Close()
	send := func(key string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-haiku-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("X-Api-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i, want := range []int{200, 402} {
		code, body := send(aliceKey)
		if code != want {
			t.Fatalf("alice's request %d: %d %s; want %d", i+1, code, body, want)
		}
		if code == 402 && (!strings.Contains(body, `key:alice:day:tokens`) || !strings.Contains(body, "+09:00")) {
			t.Errorf("the refusal does not name alice's budget and Tokyo's midnight: %s", body)
		}
	}
	if code, body := send(bobKey); code != 200 {
		t.Errorf("bob: %d %s", code, body)
	}
}
