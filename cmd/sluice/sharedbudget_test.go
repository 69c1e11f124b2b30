package main

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/sim"
	"github.com/sluicehq/sluice/spendstore"
)

// A budget binds a tenant across replicas sharing PostgreSQL: a runaway
// tenant's clients, half on each of two replicas, are refused by both
// within a write and a refresh interval of each other, and the tenant
// spends its budget once, not once per replica. The overshoot is what
// was in flight and what the other replica admitted before it read the
// crossing.
func TestSharedBudgetBindsAcrossReplicas(t *testing.T) {
	const limit = 0.40
	dsn := pgtest.Start(t)
	s := sim.New(sim.Config{TTFT: time.Millisecond, PerToken: 2 * time.Millisecond, OutputTokensMin: 64, OutputTokensMax: 64})
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	conf := filepath.Join(t.TempDir(), "sluice.toml")
	if err := os.WriteFile(conf, []byte("[[budgets]]\ntenant = \"runaway\"\nusd = 0.40\nperiod = \"day\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"SPEND_STORE=" + dsn, "DATA_DIR=" + t.TempDir(), "TENANT_FROM=header"}
	args := []string{"--config", conf}
	replicas := []*bookProcess{startBookProcess(t, "a", up.URL, args, env...), startBookProcess(t, "b", up.URL, args, env...)}

	var mu sync.Mutex
	var spent float64
	refusedAt := map[string]time.Time{}
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	start := time.Now()
	for w := range 4 {
		p := replicas[w%2]
		wg.Go(func() {
			for i := 0; time.Since(start) < 20*time.Second; i++ {
				usd, err := priceAs(client, p.url, killBody(i, false), false, "runaway")
				var se *statusError
				mu.Lock()
				if errors.As(err, &se) && se.status == http.StatusPaymentRequired {
					if _, ok := refusedAt[p.name]; !ok {
						refusedAt[p.name] = time.Now()
					}
					mu.Unlock()
					return
				}
				spent += usd
				mu.Unlock()
				if err != nil {
					t.Errorf("%s: %v", p.name, err)
					return
				}
			}
			t.Errorf("%s still admitted the runaway after 20 s", p.name)
		})
	}
	wg.Wait()
	gap := refusedAt["a"].Sub(refusedAt["b"]).Abs()
	served := s.Stats().CostUSD

	// What b's admin API says of the budget once a's last answers are
	// written and read: the whole of the runaway's spend.
	time.Sleep(spendstore.FlushEvery + budget.RefreshEvery + 500*time.Millisecond)
	req, _ := http.NewRequest(http.MethodGet, replicas[1].admin+"/admin/budgets", nil)
	req.Header.Set("X-Api-Key", killAdminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Data  []budget.Status
		Store struct {
			Shared       bool   `json:"shared"`
			EnforcedFrom string `json:"budgets_enforced_from"`
		}
	}
	json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	t.Logf("budget $%.2f: the runaway's answers cost $%.6f (the simulator: $%.6f), an overshoot of $%.6f (%.0f%%); refused by both replicas %v apart (write and refresh intervals: %v + %v)",
		limit, spent, served, served-limit, 100*(served-limit)/limit, gap.Round(time.Millisecond), spendstore.FlushEvery, budget.RefreshEvery)
	if len(out.Data) != 1 || !out.Data[0].Exceeded || !out.Store.Shared || out.Store.EnforcedFrom != "shared" {
		t.Errorf("b's /admin/budgets: %+v", out)
	} else {
		t.Logf("b's /admin/budgets: spent $%.6f, overshoot $%.6f, enforced from %s", out.Data[0].Spent, out.Data[0].Overshoot, out.Store.EnforcedFrom)
		if math.Abs(out.Data[0].Spent-served) > 1e-6 {
			t.Errorf("b's budget says $%.6f spent; the simulator served $%.6f", out.Data[0].Spent, served)
		}
	}
	if len(refusedAt) != 2 {
		t.Fatalf("refused by %d replicas", len(refusedAt))
	}
	if gap > spendstore.FlushEvery+budget.RefreshEvery+time.Second {
		t.Errorf("the replicas refused %v apart; the shared books should tell each within %v and a second", gap, spendstore.FlushEvery+budget.RefreshEvery)
	}
	if served < limit || served > 1.5*limit {
		t.Errorf("the runaway spent $%.6f of a $%.2f budget on two replicas; want at least it, and well below two budgets", served, limit)
	}
}
