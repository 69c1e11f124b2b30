package keystore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/keystore"
	"github.com/sluicehq/sluice/spendstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Sync applies the store at start, again only when its version moved,
// and turns a budget on a key named by its name into the key's hash.
func TestSyncAppliesChanges(t *testing.T) {
	ctx := context.Background()
	store, err := spendstore.Open(false, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// The poll may apply a change before the test's Now does.
	var mu sync.Mutex
	var applied int
	var last []budget.Spec
	var lastKeys []keystore.Key
	y, err := keystore.Start(store, func(keys []keystore.Key, specs []budget.Spec) {
		mu.Lock()
		defer mu.Unlock()
		applied++
		lastKeys, last = keys, specs
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Stop()
	if applied != 1 || len(lastKeys) != 0 {
		t.Fatalf("at start: applied %d, keys %v", applied, lastKeys)
	}
	if err := y.Now(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if applied != 1 {
		t.Fatalf("no change, applied again: %d", applied)
	}
	mu.Unlock()
	c := keystore.Change{At: time.Now(), Who: "test", Action: "key.create", Target: "alice"}
	sum := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if err := store.CreateKey(ctx, keystore.Key{Name: "alice", SHA256: sum}, c); err != nil {
		t.Fatal(err)
	}
	tokens := int64(100)
	b := keystore.Budget{Name: "alice-day", Scope: "key", Target: "alice"}
	b.Amount.Tokens, b.Amount.Period = &tokens, "day"
	if _, err := store.PutBudget(ctx, b, c); err != nil {
		t.Fatal(err)
	}
	if err := y.Now(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if applied < 2 || len(lastKeys) != 1 || len(last) != 1 || last[0].Key != sum[:16] || last[0].Limit != 100 {
		t.Errorf("after a change: applied %d, keys %v, budgets %+v", applied, lastKeys, last)
	}
}

// A budget of scope group binds each member of the identity provider's
// group: its target is the group, kept as the store has it.
func TestBudgetScopeGroup(t *testing.T) {
	usd := 5.0
	sp, err := keystore.Budget{Name: "contractors-day", Scope: "group", Target: "contractors", Amount: budget.File{USD: &usd, Period: "day"}}.Spec(nil)
	if err != nil || sp.Group != "contractors" || sp.Tenant != "" || sp.Key != "" || sp.Name != "contractors-day" || sp.Limit != 5 {
		t.Errorf("scope group: %+v, %v", sp, err)
	}
	if _, err := (keystore.Budget{Name: "b", Scope: "group", Amount: budget.File{USD: &usd, Period: "day"}}).Spec(nil); err == nil {
		t.Error("scope group without a target: no error")
	}
	if _, err := (keystore.Budget{Name: "b", Scope: "team", Target: "x", Amount: budget.File{USD: &usd, Period: "day"}}).Spec(nil); err == nil || err.Error() != `scope "team": want key, tenant or group` {
		t.Errorf("an unknown scope: %v", err)
	}
}
