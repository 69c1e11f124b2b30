package spend

import (
	"math"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/price"
)

// Add counts each kind's tokens and USD under its key, and the cost it
// returns is what it counted; a batch counts at half.
func TestAdd(t *testing.T) {
	l := New(nil, 10)
	k := Key{Tenant: "a", Inbound: "0123456789abcdef", Model: "claude-sonnet-4-5"}
	u := price.Usage{Input: 1000, Output: 100, CacheWrite5m: 2000, CacheWrite1h: 3000, CacheRead: 4000}
	c1 := l.Add(k, u, false, false)
	c2 := l.Add(k, u, true, false)
	rows := l.Rows()
	if len(rows) != 1 || rows[0].Key != k {
		t.Fatalf("rows %+v", rows)
	}
	r := rows[0]
	for kind := range price.Kinds {
		if r.Tokens[kind] != 2*u.Tokens(kind) {
			t.Errorf("%s: %d tokens, want %d", kind, r.Tokens[kind], 2*u.Tokens(kind))
		}
		if want := c1.USD[kind] * 1.5; math.Abs(r.USD[kind]-want) > 1e-15 || c2.USD[kind] != c1.USD[kind]/2 {
			t.Errorf("%s: %v USD, want %v (batch %v of %v)", kind, r.USD[kind], want, c2.USD[kind], c1.USD[kind])
		}
	}
	if r.EstimatedUSD != 0 || r.UnpricedTokens != 0 {
		t.Errorf("%+v: nothing was estimated or unpriced", r)
	}
}

// A model with no price counts in tokens, not in USD, and says so; an
// estimated usage's cost is counted, and also as estimated.
func TestUnpricedAndEstimated(t *testing.T) {
	l := New(nil, 10)
	c := l.Add(Key{Tenant: "a", Model: "gpt-4o"}, price.Usage{Input: 10, Output: 5}, false, false)
	e := l.Add(Key{Tenant: "a", Model: "claude-opus-4-5"}, price.Usage{Input: 10, Output: 5}, false, true)
	for _, r := range l.Rows() {
		switch r.Model {
		case "gpt-4o":
			if r.TotalUSD() != 0 || r.UnpricedTokens != 15 || r.Tokens[price.Output] != 5 || c.Basis != price.Unknown {
				t.Errorf("unpriced: %+v (%+v)", r, c)
			}
		default:
			if r.EstimatedUSD != e.Total() || r.TotalUSD() != e.Total() || e.Total() == 0 {
				t.Errorf("estimated: %+v (%+v)", r, e)
			}
		}
	}
}

// Past its rows the ledger counts in Other, whole: the labels stay bounded
// and the totals stay right.
func TestBounded(t *testing.T) {
	l := New(nil, 3)
	u := price.Usage{Input: 1_000_000}
	for _, tenant := range []string{"a", "b", "c", "d", "e"} {
		l.Add(Key{Tenant: tenant, Model: "claude-sonnet-4-5"}, u, false, false)
	}
	rows := l.Rows()
	var total float64
	var other bool
	for _, r := range rows {
		total += r.TotalUSD()
		other = other || r.Key == Other
	}
	if len(rows) != 4 || !other || total != 15 {
		t.Errorf("%d rows (other %v), $%v in all; want 3 and other, $15", len(rows), other, total)
	}
}

// ByTenantModel sums a tenant's keys on each model, the costliest first.
func TestByTenantModel(t *testing.T) {
	l := New(nil, 10)
	l.Add(Key{Tenant: "a", Inbound: "k1", Model: "claude-sonnet-4-5"}, price.Usage{Output: 1_000_000}, false, false)
	l.Add(Key{Tenant: "a", Inbound: "k2", Model: "claude-sonnet-4-5"}, price.Usage{Output: 1_000_000}, false, false)
	l.Add(Key{Tenant: "b", Inbound: "k3", Model: "claude-opus-4-5"}, price.Usage{Output: 1_000_000}, false, false)
	l.Add(Key{Tenant: "c", Inbound: "k3", Model: "claude-haiku-4-5"}, price.Usage{Output: 1_000_000}, false, false)
	got := l.ByTenantModel(2)
	want := []TenantModel{{Tenant: "a", Model: "claude-sonnet-4-5", USD: 30, Tokens: 2_000_000}, {Tenant: "b", Model: "claude-opus-4-5", USD: 25, Tokens: 1_000_000}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("%+v, want %+v", got, want)
	}
}

// Counting into a row that exists allocates nothing: it is on every
// answered request's path.
func TestAddAllocatesNothing(t *testing.T) {
	l := New(nil, 10)
	k := Key{Tenant: "a", Inbound: "k", Model: "claude-sonnet-4-5"}
	u := price.Usage{Input: 10, Output: 10, CacheRead: 10}
	l.Add(k, u, false, false)
	if n := testing.AllocsPerRun(100, func() { l.Add(k, u, false, false) }); n != 0 {
		t.Errorf("%v allocations per Add", n)
	}
}

// Concurrent adds lose nothing (run with -race).
func TestConcurrentAdds(t *testing.T) {
	l := New(nil, 4)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 1000 {
				l.Add(Key{Tenant: string(rune('a' + i%3)), Model: "claude-sonnet-4-5"}, price.Usage{Output: 1}, false, false)
			}
		})
	}
	wg.Wait()
	var n int64
	for _, r := range l.Rows() {
		n += r.Tokens[price.Output]
	}
	if n != 8000 {
		t.Errorf("%d output tokens counted, want 8000", n)
	}
}
