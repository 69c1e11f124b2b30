package budget

import (
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// others is what the other replicas wrote to shared books: tenant's USD
// since its period's start, or an error while the store is down.
type others struct {
	mu    sync.Mutex
	usd   map[string]float64
	err   error
	reads int
}

func (o *others) Others(from time.Time, tenant, key string) (float64, int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reads++
	if o.err != nil {
		return 0, 0, o.err
	}
	return o.usd[tenant], 0, nil
}

func (o *others) set(tenant string, usd float64, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.usd[tenant], o.err = usd, err
}

// A budget shared by replicas binds their spend together: this replica's
// count and the others' as read every RefreshEvery. A read that fails
// keeps the last, and says the budgets hold from memory.
func TestSharedBudgetCountsTheOtherReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mustSet(t, nil, Spec{Tenant: "acme", Limit: 10, Period: Day})
		o := &others{usd: map[string]float64{"acme": 3}}
		stop := s.Share(o)
		defer stop()
		if !s.Shared() || s.FromMemory() {
			t.Fatalf("shared %v, from memory %v", s.Shared(), s.FromMemory())
		}
		spendUSD(s, "acme", 4) // 3 + 4 of 10
		if refusal(t, s, tenantReq("acme")) != nil {
			t.Fatal("refused at 7 of 10")
		}
		o.set("acme", 5, nil) // the others spent 2 more: 5 + 4, not yet read
		if refusal(t, s, tenantReq("acme")) != nil {
			t.Fatal("refused before the others' spend was read")
		}
		time.Sleep(RefreshEvery)
		synctest.Wait()
		if st := s.Statuses()[0]; st.Spent != 9 {
			t.Fatalf("spent %v after a refresh; want 9 (5 by the others, 4 here)", st.Spent)
		}
		o.set("acme", 7, nil) // 7 + 4: past the limit by the others' spend alone
		time.Sleep(RefreshEvery)
		synctest.Wait()
		e := refusal(t, s, tenantReq("acme"))
		if e == nil {
			t.Fatal("admitted at 11 of 10, 7 of it the other replicas'")
		}
		if st := s.Statuses()[0]; st.Overshoot != 1 || !st.Exceeded {
			t.Errorf("status %+v; want an overshoot of 1", st)
		}

		o.set("acme", 7, errors.New("store down"))
		time.Sleep(RefreshEvery)
		synctest.Wait()
		if !s.FromMemory() {
			t.Error("a failed read: the budgets do not say they hold from memory")
		}
		if st := s.Statuses()[0]; st.Spent != 11 || refusal(t, s, tenantReq("acme")) == nil {
			t.Errorf("after a failed read: spent %v; want the last read's 11, still refused", st.Spent)
		}
		o.set("acme", 7, nil)
		time.Sleep(RefreshEvery)
		synctest.Wait()
		if s.FromMemory() {
			t.Error("the store back: the budgets still say they hold from memory")
		}

		// The next day starts at 0 here and there.
		o.set("acme", 0, nil)
		time.Sleep(time.Until(s.Statuses()[0].Reset))
		synctest.Wait()
		if st := s.Statuses()[0]; st.Spent != 0 || refusal(t, s, tenantReq("acme")) != nil {
			t.Errorf("a new day: spent %v; want 0, admitted", st.Spent)
		}
		stop()
		o.mu.Lock()
		n := o.reads
		o.mu.Unlock()
		time.Sleep(10 * RefreshEvery)
		if o.reads != n {
			t.Errorf("%d reads after stop", o.reads-n)
		}
	})
}
