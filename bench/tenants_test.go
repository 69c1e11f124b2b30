package bench

import (
	"reflect"
	"testing"
)

// A tenants workload merges each tenant's arrivals, each carrying its
// tenant, and a tenant draws alike with or without the others.
func TestTenantsWorkload(t *testing.T) {
	noisy, err := LoadScenario("noisy-neighbour")
	if err != nil {
		t.Fatal(err)
	}
	alone, err := LoadScenario("noisy-neighbour-alone")
	if err != nil {
		t.Fatal(err)
	}
	as, err := noisy.Arrivals()
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	var b []Arrival
	for i, a := range as {
		count[a.Tenant]++
		if a.Tenant == "b" {
			b = append(b, a)
		}
		if i > 0 && a.At < as[i-1].At {
			t.Fatalf("arrival %d at %v before the one before it", i, a.At)
		}
	}
	if count["a"] != 1000 || count["b"] != 40 || len(count) != 2 {
		t.Errorf("arrivals by tenant %v; want a 1000, b 40", count)
	}
	bs, err := alone.Arrivals()
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != len(b) {
		t.Fatalf("b alone: %d arrivals; with a: %d", len(bs), len(b))
	}
	for i := range bs {
		if !reflect.DeepEqual(bs[i], b[i]) {
			t.Fatalf("b's arrival %d: alone %+v, with a %+v", i, bs[i], b[i])
		}
	}
	recs := []Record{{Tenant: "a", Outcome: "ok", ArrivalMS: 0, DoneMS: 1000}, {Tenant: "a", Outcome: "error", ArrivalMS: 0, DoneMS: 2000},
		{Tenant: "b", Outcome: "ok", ArrivalMS: 500, DoneMS: 700}}
	trs := tenantReports(recs, []string{"a", "b"})
	if trs[0].Sent != 2 || trs[0].Succeeded != 1 || trs[0].GoodputRPS != 0.5 || trs[1].LatencyMS.P99 != 200 {
		t.Errorf("tenant reports %+v; want a 2 sent, 1 ok, 0.5/s; b p99 200 ms", trs)
	}
}

func TestTenantsWorkloadRefusals(t *testing.T) {
	for _, js := range []string{
		`{"workload":{"kind":"tenants"}}`,
		`{"workload":{"kind":"tenants","tenants":[{"name":"a","kind":"burst","n":1},{"name":"a","kind":"burst","n":1}]}}`,
		`{"workload":{"kind":"tenants","tenants":[{"name":"a","kind":"steps"}]}}`,
		`{"workload":{"kind":"tenants","tenants":[{"name":"a","kind":"poisson"}]}}`,
	} {
		if _, err := ParseScenario([]byte(js), "test", nil); err == nil {
			t.Errorf("ParseScenario(%s) accepted", js)
		}
	}
}
