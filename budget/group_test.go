package budget

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/spend"
)

// memberReq is a request of a person signed in through the identity
// provider: their tenant and their groups.
func memberReq(tenant string, groups ...string) *request.Descriptor {
	return &request.Descriptor{Tenant: tenant, Inbound: &request.Inbound{Name: tenant, Tenant: tenant, Groups: groups}}
}

// A group budget binds each member of the group on their own: one
// member past it is refused, naming the group budget and the member,
// while another member keeps their own limit whole. A sluice key's
// request (no groups) of the same tenant, and a person outside the
// group, are not bound by it.
func TestGroupBudgetBindsEachMember(t *testing.T) {
	s := mustSet(t, nil, Spec{Name: "contractors-day", Group: "contractors", Limit: 5, Period: Day})
	alice, bob := memberReq("alice@example.com", "contractors"), memberReq("bob@example.com", "eng", "contractors")
	if refusal(t, s, alice) != nil || refusal(t, s, bob) != nil {
		t.Fatal("refused before anything was spent")
	}
	spendUSD(s, "alice@example.com", 4)
	spendUSD(s, "bob@example.com", 4)
	if refusal(t, s, alice) != nil || refusal(t, s, bob) != nil {
		t.Fatal("refused at $4 of each member's $5")
	}
	spendUSD(s, "alice@example.com", 1.5)
	e := refusal(t, s, alice)
	if e == nil {
		t.Fatal("alice admitted at $5.50 of her $5")
	}
	for _, want := range []string{`"contractors-day/alice@example.com"`, `group "contractors"`, `"alice@example.com"`, "$5.50 of its $5.00 limit this day"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("refusal %q does not say %s", e.Message, want)
		}
	}
	if e := refusal(t, s, bob); e != nil {
		t.Fatalf("bob refused for alice's spend: %s", e.Message)
	}
	// Together they spent $9.50, past $5: the budget is not the group's sum.
	if refusal(t, s, memberReq("carol@example.com", "contractors")) != nil {
		t.Error("a member who spent nothing refused")
	}
	if refusal(t, s, tenantReq("alice@example.com")) != nil {
		t.Error("alice's tenant by a sluice key (no groups) refused by a group budget")
	}
	if refusal(t, s, memberReq("alice@example.com", "eng")) != nil {
		t.Error("alice's token without the group refused by its budget")
	}
	if refusal(t, s, memberReq("dave@example.com")) != nil || refusal(t, s, memberReq("", "contractors")) != nil {
		t.Error("a token in no group, or without a tenant, refused")
	}
}

// A member of several budgeted groups is bound by each: the tightest
// refuses first, each naming itself.
func TestMemberOfSeveralGroupsBoundByEach(t *testing.T) {
	s := mustSet(t, nil,
		Spec{Name: "contractors-day", Group: "contractors", Limit: 5, Period: Day},
		Spec{Name: "ml-day", Group: "ml", Limit: 3, Period: Day},
		Spec{Name: "ml-tokens", Group: "ml", Unit: Tokens, Limit: 100, Period: Day})
	both := memberReq("alice@example.com", "contractors", "ml")
	if refusal(t, s, both) != nil { // her first request: her budgets start (from the books, here none)
		t.Fatal("refused before anything was spent")
	}
	spendUSD(s, "alice@example.com", 3)
	if e := refusal(t, s, both); e == nil || !strings.Contains(e.Message, `"ml-day/alice@example.com"`) {
		t.Fatalf("at $3 of ml's $3: %v", e)
	}
	if refusal(t, s, memberReq("alice@example.com", "contractors")) != nil {
		t.Error("alice refused by ml's budget on a token without ml")
	}
	spendUSD(s, "alice@example.com", 2)
	if e := refusal(t, s, memberReq("alice@example.com", "contractors")); e == nil || !strings.Contains(e.Message, `"contractors-day/alice@example.com"`) {
		t.Fatalf("at $5 of contractors' $5: %v", e)
	}
}

// What a group budget's members hold (Message Batches, bulk requests)
// is held against each member's own budget, and refused past what is
// left of it; a sluice key (the zero Member) holds nothing there.
func TestGroupBudgetReserveByMember(t *testing.T) {
	s := mustSet(t, nil, Spec{Name: "contractors-day", Group: "contractors", Limit: 5, Period: Day})
	alice := Member{Tenant: "alice@example.com", Groups: []string{"contractors"}}
	r, e := s.Reserve("alice@example.com", "k", alice, Estimate{USD: 4})
	if e != nil || r == nil {
		t.Fatalf("$4 of alice's $5: %v", e)
	}
	if _, e := s.Reserve("alice@example.com", "k", alice, Estimate{USD: 2}); e == nil || !strings.Contains(e.Message, `"contractors-day/alice@example.com"`) {
		t.Fatalf("$2 more with $1 left: %v", e)
	}
	if r, e := s.Reserve("bob@example.com", "k", Member{Tenant: "bob@example.com", Groups: []string{"contractors"}}, Estimate{USD: 5}); r == nil || e != nil {
		t.Errorf("bob's whole $5: %v", e)
	}
	if r, e := s.Reserve("alice@example.com", "k", Member{}, Estimate{USD: 100}); r != nil || e != nil {
		t.Errorf("a sluice key's batch held by a group budget: %v %v", r, e)
	}
	spendUSD(s, "alice@example.com", 1)
	if e := s.OverMember(alice); e == nil || !strings.Contains(e.Message, "$4.00 more is held") {
		t.Errorf("alice with $4 held of $5 and $1 spent: %v", e)
	}
	r.Release()
	if e := s.OverMember(alice); e != nil {
		t.Errorf("released: %s", e.Message)
	}
}

// /admin/budgets and the metrics list the group budget, with what its
// members spent together, and each member seen, named budget/member.
// A member starts from what the books say their tenant spent in the
// period, and keeps their spend when the group budget's limit changes.
func TestGroupBudgetStatusesAndReplace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := NewLive(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		mk := func(limit float64) Spec {
			sp := Spec{Name: "contractors-day", Group: "contractors", Limit: limit, Period: Day}
			if err := sp.Check(); err != nil {
				t.Fatal(err)
			}
			return sp
		}
		if err := s.Replace([]Spec{mk(5)}, books{"2000-01-01/alice@example.com": 4.5}); err != nil {
			t.Fatal(err)
		}
		if e := refusal(t, s, memberReq("alice@example.com", "contractors")); e != nil {
			t.Fatalf("at $4.50 of $5: %s", e.Message)
		}
		if refusal(t, s, memberReq("bob@example.com", "contractors")) != nil {
			t.Fatal("bob refused")
		}
		spendUSD(s, "alice@example.com", 1)
		if refusal(t, s, memberReq("alice@example.com", "contractors")) == nil {
			t.Fatal("alice admitted at $5.50 (her $4.50 before, from the books, and $1) of $5")
		}
		st := s.Statuses()
		if len(st) != 3 {
			t.Fatalf("statuses %+v; want the group budget and its two members", st)
		}
		g, a, b := st[0], st[1], st[2]
		if g.Name != "contractors-day" || g.Group != "contractors" || g.Members == nil || *g.Members != 2 || g.Spent != 5.5 || g.Limit != 5 || g.Exceeded {
			t.Errorf("the group budget's row %+v", g)
		}
		if a.Name != "contractors-day/alice@example.com" || a.Tenant != "alice@example.com" || a.Group != "contractors" || a.Spent != 5.5 || !a.Exceeded {
			t.Errorf("alice's row %+v", a)
		}
		if b.Name != "contractors-day/bob@example.com" || b.Spent != 0 || b.Exceeded {
			t.Errorf("bob's row %+v", b)
		}
		if err := s.Replace([]Spec{mk(10)}, books{}); err != nil {
			t.Fatal(err)
		}
		if e := refusal(t, s, memberReq("alice@example.com", "contractors")); e != nil {
			t.Fatalf("at $5.50 of a raised $10: %s", e.Message)
		}
		if st := s.Statuses(); len(st) != 3 || st[1].Spent != 5.5 || st[1].Limit != 10 {
			t.Errorf("raised: %+v; want alice's $5.50 kept, of $10", st)
		}
		time.Sleep(24 * time.Hour)
		if st := s.Statuses(); st[1].Spent != 0 || st[0].Spent != 0 {
			t.Errorf("the next day: %+v", st)
		}
		if err := s.Replace(nil, nil); err != nil || len(s.Statuses()) != 0 {
			t.Errorf("deleted: %v, %+v", err, s.Statuses())
		}
	})
}

// A member's own budget binds across replicas as a tenant's does: it
// reads what the other replicas spent when it is made, and at each
// refresh.
func TestGroupMemberSharedAcrossReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mustSet(t, nil, Spec{Name: "contractors-day", Group: "contractors", Limit: 5, Period: Day})
		o := &othersBooks{others{usd: map[string]float64{"alice@example.com": 3}}}
		stop := s.Share(o)
		defer stop()
		alice := memberReq("alice@example.com", "contractors")
		if refusal(t, s, alice) != nil {
			t.Fatal("refused at $3 of $5")
		}
		if st := s.Statuses(); st[1].Spent != 3 {
			t.Fatalf("alice's row %+v; want the others' $3", st[1])
		}
		o.set("alice@example.com", 5, nil)
		time.Sleep(RefreshEvery)
		synctest.Wait()
		if refusal(t, s, alice) == nil {
			t.Fatal("admitted once the other replicas' $5 was read")
		}
	})
}

// othersBooks is shared books: Since is what every replica spent, here
// the others' alone.
type othersBooks struct{ others }

func (o *othersBooks) Since(from time.Time, tenant, key string) (float64, int64, error) {
	return o.Others(from, tenant, key)
}

// slowBooks answers Since once release is closed.
type slowBooks struct {
	release chan struct{}
	usd     float64
}

func (b slowBooks) Since(time.Time, string, string) (float64, int64, error) {
	<-b.release
	return b.usd, 0, nil
}

// A member's first request waits at most MemberReadWait for the books;
// what they say is taken in when they answer.
func TestGroupMemberReadBoundedWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := NewLive(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sp := Spec{Name: "contractors-day", Group: "contractors", Limit: 5, Period: Day}
		if err := sp.Check(); err != nil {
			t.Fatal(err)
		}
		b := slowBooks{release: make(chan struct{}), usd: 6}
		if err := s.Replace([]Spec{sp}, b); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if refusal(t, s, memberReq("alice@example.com", "contractors")) != nil {
			t.Fatal("refused before the books answered")
		}
		if waited := time.Since(start); waited != MemberReadWait {
			t.Errorf("waited %v for the books; want MemberReadWait, %v", waited, MemberReadWait)
		}
		close(b.release)
		synctest.Wait()
		if e := refusal(t, s, memberReq("alice@example.com", "contractors")); e == nil || !strings.Contains(e.Message, "$6.00 of its $5.00") {
			t.Errorf("once the books answered $6: %v", e)
		}
	})
}

// New members whose books are slow to read each wait MemberReadWait at
// most, not one after another: ten members' first requests at once all
// go on after MemberReadWait (they waited 1 s, 2 s, … 10 s in a line).
// A second request of a member still being read waits for the same read.
func TestGroupMembersReadTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := NewLive(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		sp := Spec{Name: "contractors-day", Group: "contractors", Limit: 5, Period: Day}
		if err := sp.Check(); err != nil {
			t.Fatal(err)
		}
		b := slowBooks{release: make(chan struct{}), usd: 6}
		if err := s.Replace([]Spec{sp}, b); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		waited := make([]time.Duration, 11)
		for i := range waited {
			who := fmt.Sprintf("m%d@example.com", min(i, 9)) // the last is m9's second request
			wg.Go(func() {
				refusal(t, s, memberReq(who, "contractors"))
				waited[i] = time.Since(start)
			})
		}
		wg.Wait()
		for i, w := range waited {
			if w > MemberReadWait {
				t.Errorf("request %d waited %v for the books; want at most MemberReadWait, %v", i, w, MemberReadWait)
			}
		}
		close(b.release)
		synctest.Wait()
	})
}

// BenchmarkGroupRequestPath is BenchmarkRequestPath for a member of a
// budgeted group, their own budget already made.
//
//	go test -run '^$' -bench GroupRequestPath ./budget/
func BenchmarkGroupRequestPath(b *testing.B) {
	sp := Spec{Group: "contractors", Limit: 1e12, Warn: 1e11, Period: Day, Zone: time.UTC}
	if err := sp.Check(); err != nil {
		b.Fatal(err)
	}
	s, _ := New([]Spec{sp}, nil)
	r := memberReq("alice@example.com", "eng", "contractors")
	e := spend.Entry{Key: spend.Key{Tenant: "alice@example.com", Inbound: "k", Model: "m"}, USD: 0.01, Tokens: 100}
	b.ReportAllocs()
	for b.Loop() {
		if s.Refuse(r) != nil {
			b.Fatal("refused")
		}
		s.Spent(e)
	}
}

// The metrics have a series for each member's own budget, named
// budget/member, and none for the group budget's row (its spent is the
// members' together: a sum over the series would count it twice).
func TestGroupBudgetMetrics(t *testing.T) {
	s := mustSet(t, nil, Spec{Name: "contractors-day", Group: "contractors", Limit: 5, Period: Day})
	refusal(t, s, memberReq("alice@example.com", "contractors"))
	spendUSD(s, "alice@example.com", 2)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	want := `
# HELP sluice_budget_spent What each budget's tenant or key spent this period, in the budget's unit (usd or tokens).
# TYPE sluice_budget_spent gauge
sluice_budget_spent{budget="contractors-day/alice@example.com",unit="usd"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sluice_budget_spent"); err != nil {
		t.Error(err)
	}
}
