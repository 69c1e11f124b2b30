package budget

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// A budget replaced with a new limit keeps what was spent; a new one
// starts from the books; one left out binds no more.
func TestReplaceKeepsSpend(t *testing.T) {
	mk := func(name, tenant string, usd float64) Spec {
		sp := Spec{Name: name, Tenant: tenant, Unit: USD, Limit: usd, Period: Day}
		if err := sp.Check(); err != nil {
			t.Fatal(err)
		}
		return sp
	}
	s, err := NewLive(nil, nil)
	if err != nil || s == nil {
		t.Fatalf("NewLive: %v, %v", s, err)
	}
	if err := s.Replace([]Spec{mk("a", "acme", 1)}, nil); err != nil {
		t.Fatal(err)
	}
	s.Spent(spend.Entry{Key: spend.Key{Tenant: "acme"}, USD: 0.6})
	if s.Over("acme", "") != nil {
		t.Fatal("refused under its limit")
	}
	if err := s.Replace([]Spec{mk("a", "acme", 0.5), mk("b", "beta", 1)}, fixedBooks{usd: 2}); err != nil {
		t.Fatal(err)
	}
	if s.Over("acme", "") == nil {
		t.Error("the lowered limit, under the spend kept, did not refuse")
	}
	if s.Over("beta", "") == nil {
		t.Error("a new budget did not start from what the books say was spent")
	}
	if err := s.Replace(nil, nil); err != nil {
		t.Fatal(err)
	}
	if s.Over("acme", "") != nil || len(s.Statuses()) != 0 {
		t.Error("a budget left out still binds")
	}
}

type fixedBooks struct{ usd float64 }

func (b fixedBooks) Since(time.Time, string, string) (float64, int64, error) { return b.usd, 0, nil }
