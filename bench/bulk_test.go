package bench

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
)

// TestRunBulk runs the same work through plain and through the bulk
// endpoint: the same tokens, half the cost, every request's latency at
// least the bulk window's wait, and the table and verdict say 0.50x.
func TestRunBulk(t *testing.T) {
	sc := mustParse(t, `{"name":"bulk-test","seed":3,
		"sim":{"ttft":"10ms","per_token":"1ms","capacity":16,"batch_duration":"100ms"},
		"sluice":{"bulk_max_wait":"300ms","bulk_poll":"20ms"},
		"client":{"timeout":"10s"},
		"workload":{"kind":"burst","n":30,"prompt_tokens":[10,50],"output_tokens":[4,12]}}`)
	rep, err := Run(context.Background(), Options{Scenario: sc, Modes: []string{ModePlain, ModeBulk}})
	if err != nil {
		t.Fatal(err)
	}
	p, b := rep.Mode(ModePlain), rep.Mode(ModeBulk)
	if p == nil || b == nil {
		t.Fatalf("modes %v; want plain and bulk", rep.Modes)
	}
	for _, m := range []*ModeReport{p, b} {
		if m.Sent != 30 || m.Succeeded != 30 {
			t.Fatalf("%s: sent %d, succeeded %d (%v); want all 30", m.Mode, m.Sent, m.Succeeded, m.Errors)
		}
	}
	if p.Tokens.Input != b.Tokens.Input || p.Tokens.Output != b.Tokens.Output || p.Tokens.Output == 0 {
		t.Errorf("tokens plain %+v, bulk %+v; want the same work", p.Tokens, b.Tokens)
	}
	if math.Abs(b.CostVsPlain-0.5) > 1e-9 || math.Abs(b.CostUSD/p.CostUSD-0.5) > 1e-9 {
		t.Errorf("bulk cost $%v vs plain $%v (cost_vs_plain %v); want half", b.CostUSD, p.CostUSD, b.CostVsPlain)
	}
	// Submitted at once, the requests go upstream when the window's
	// 300 ms are up: nobody's result comes sooner.
	var bulkRecords []Record
	for _, res := range rep.Results() {
		if res.Mode == ModeBulk {
			bulkRecords = res.Records
		}
	}
	for _, r := range bulkRecords {
		if r.DoneMS-r.ArrivalMS < 300 || r.FirstByteMS == nil || *r.FirstByteMS > r.DoneMS {
			t.Fatalf("bulk record %+v: want the 202 first and the result after the 300 ms window", r)
		}
	}
	var tbl bytes.Buffer
	rep.WriteTable(&tbl)
	if !strings.Contains(tbl.String(), "cost vs plain") || !strings.Contains(tbl.String(), "0.50x") {
		t.Errorf("table has no cost vs plain of 0.50x:\n%s", tbl.String())
	}
	if v := rep.Verdict(); !strings.Contains(v, "verdict, bulk vs plain") || !strings.Contains(v, "cost (0.50x)") ||
		!strings.Contains(v, "wins on") {
		t.Errorf("verdict %q; want bulk vs plain winning on cost (0.50x)", v)
	}
}

// TestBulkScenario checks the built-in bulk scenario asks for what the
// report's comparison needs.
func TestBulkScenario(t *testing.T) {
	sc, err := LoadScenario("bulk")
	if err != nil {
		t.Fatal(err)
	}
	if sc.Workload.StreamFraction != 0 || sc.Sim.BatchDuration <= 0 || sc.Sluice.BulkMaxWait <= 0 {
		t.Errorf("bulk scenario %+v: want no streams, a batch duration and a bulk max wait", sc)
	}
}
