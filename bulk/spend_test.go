package bulk

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/spend"
)

// Bulk results are charged at the Message Batches price, under the tenant
// bulk and the key's hash: the same, to a billionth, as the simulator's
// own cost of the batch, and half of what the tokens cost in realtime.
func TestResultsChargedAtBatchPrice(t *testing.T) {
	ledger := spend.New(nil, 10)
	h := newHarness(t, Config{MaxRequests: 3, Spend: ledger})
	var ids []string
	for i := range 3 {
		ids = append(ids, h.submit(msgBody(fmt.Sprint("what does this cost? ", i))))
	}
	for _, id := range ids {
		if v := h.await(id); resultType(v) != "succeeded" {
			t.Fatalf("%s: %v", id, v)
		}
	}
	rows := ledger.Rows()
	if len(rows) != 1 {
		t.Fatalf("rows %+v; want one", rows)
	}
	r := rows[0]
	if want := (spend.Key{Tenant: SpendTenant, Inbound: credential{"x-api-key", testKey}.hash()[:16], Model: "claude-sonnet-4-5"}); r.Key != want {
		t.Errorf("key %+v, want %+v", r.Key, want)
	}
	st := h.sim.Stats()
	if got := r.TotalUSD(); got == 0 || math.Abs(got-st.CostUSD) > 1e-9*st.CostUSD {
		t.Errorf("charged $%.9f; the simulator's batch cost $%.9f", got, st.CostUSD)
	}
	u := price.Usage{Input: r.Tokens[price.Input], Output: r.Tokens[price.Output]}
	if realtime := price.Default().Cost("claude-sonnet-4-5", u, false).Total(); math.Abs(r.TotalUSD()-realtime/2) > 1e-12 {
		t.Errorf("charged $%v for tokens that cost $%v in realtime; want half", r.TotalUSD(), realtime)
	}
}

// A result whose usage a broken upstream reports negative is charged
// nothing for it: its cost went negative, and sluice_bulk_savings_usd_total
// is a counter, whose Add of it panicked on the poller's goroutine, which
// no one recovers (the process ended).
func TestNegativeResultUsageChargedNothing(t *testing.T) {
	ledger := spend.New(nil, 10)
	h := newHarness(t, Config{MaxRequests: 3, Spend: ledger})
	h.svc.countResult("0123456789abcdef0123", json.RawMessage(`{"type":"succeeded","message":{"model":"claude-sonnet-4-5",`+
		`"usage":{"input_tokens":-1000000,"output_tokens":10}}}`))
	rows := ledger.Rows()
	if len(rows) != 1 || rows[0].Tokens[price.Input] != 0 || rows[0].TotalUSD() < 0 {
		t.Fatalf("rows %+v; want one, charged the output alone", rows)
	}
}
