package bulk

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/spend"
)

// A key whose bulk spend is past its budget has its submissions refused
// before they are read or stored, with the budget's 402; another key's
// go on. The budget hears the results' spend from the ledger, under the
// tenant bulk and the key's short hash.
func TestSubmissionPastItsBudgetIsRefused(t *testing.T) {
	// The key as bulk counts it: its owner's hash, the page's bulk table's
	// key (not the hash the Messages path labels it by).
	hash := credential{"x-api-key", testKey}.hash()[:16]
	sp := budget.Spec{Key: hash, Unit: budget.Tokens, Limit: 10, Period: budget.Day}
	if err := sp.Check(); err != nil {
		t.Fatal(err)
	}
	set, err := budget.New([]budget.Spec{sp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ledger := spend.New(nil, 10)
	ledger.Tell(set)
	h := newHarness(t, Config{DataDir: t.TempDir(), Secret: "s", MaxWait: time.Hour, Spend: ledger, Budgets: set})
	body := `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	h.submit(body) // under its budget
	// Its results' spend, as countResult counts it.
	ledger.Add(spend.Key{Tenant: SpendTenant, Inbound: hash, Model: "claude-sonnet-4-5"}, price.Usage{Input: 6, Output: 6}, true, false)
	code, hdr, v := h.post(testKey, body)
	e, _ := v["error"].(map[string]any)
	if code != http.StatusPaymentRequired || hdr.Get("X-Should-Retry") != "false" || e["type"] != "billing_error" ||
		!strings.Contains(e["message"].(string), "12 tokens of its 10 tokens limit") {
		t.Fatalf("past the budget: %d %v %v", code, hdr, v)
	}
	if code, v := h.doWith("sk-another-key", "POST", "/v1/bulk/messages", body); code != http.StatusAccepted {
		t.Errorf("another key's submission: %d %v", code, v)
	}
}
