package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/budget"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/oidctest"
	"github.com/sluicehq/sluice/oidcauth"
)

var (
	contractorAlice = oidctest.User{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"contractors"}}
	contractorBob   = oidctest.User{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"eng", "contractors"}}
	engCarol        = oidctest.User{Subject: "u-carol", Email: "carol@example.com", Groups: []string{"eng"}}
)

// A budget on an identity provider's group binds each member of it on
// their own, by the tenant their token names: with real tokens of a real
// provider, alice past her day's budget of the contractors' budget is
// refused (402, naming the group budget and her) on the Messages path,
// streamed or not, and for a Message Batch, while bob, of the same group,
// is still answered; carol, of another group, and a sluice key of
// alice's tenant are not bound by it.
func TestGroupBudgetBindsEachSignedInMember(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		sp := budget.Spec{Name: "contractors-day", Group: "contractors", Unit: budget.Tokens, Limit: 1, Period: budget.Day}
		if err := sp.Check(); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t, "", windowed, func(c *config.Config) { c.Budgets = []budget.Spec{sp} })
		f, idp := startTokensFor(t, []oidcauth.Group{{Name: "*"}}, cfg, Options{}, keyEntry("alice-svc", `"tenant":"alice@example.com"`))
		alice, bob, carol := idp.Token(t, contractorAlice).ID, idp.Token(t, contractorBob).ID, idp.Token(t, engCarol).ID

		if status, body := send(t, "POST", f.url+"/v1/messages", requestJSON, "bearer", alice); status != http.StatusOK {
			t.Fatalf("alice's first request: %d %s", status, body)
		}
		for _, req := range []string{requestJSON, streamRequestJSON} {
			status, body := send(t, "POST", f.url+"/v1/messages", req, "bearer", alice)
			if status != http.StatusPaymentRequired || errorType(t, body) != "billing_error" {
				t.Fatalf("alice past her budget: %d %s", status, body)
			}
			for _, want := range []string{`\"contractors-day/alice@example.com\"`, `group \"contractors\"`, "resets at", "ask sluice's operator to raise the budget"} {
				if !strings.Contains(body, want) {
					t.Errorf("alice's refusal %s does not say %s", body, want)
				}
			}
		}
		calls := f.sim.Stats().Requests
		if status, body := send(t, "POST", f.url+"/v1/messages/batches", batchJSON(1), "bearer", alice); status != http.StatusPaymentRequired || !strings.Contains(body, "contractors-day/alice@example.com") {
			t.Errorf("alice's Message Batch past her budget: %d %s", status, body)
		}
		if n := f.sim.Stats().Requests; n != calls {
			t.Errorf("a refused request reached the upstream (%d calls, then %d)", calls, n)
		}
		if status, body := send(t, "POST", f.url+"/v1/messages", requestJSON, "bearer", bob); status != http.StatusOK {
			t.Fatalf("bob, of the same group, with his own budget whole: %d %s", status, body)
		}
		if status, _ := send(t, "POST", f.url+"/v1/messages", requestJSON, "bearer", bob); status != http.StatusPaymentRequired {
			t.Errorf("bob past his own budget: %d", status)
		}
		for who, cred := range map[string][2]string{"carol, of another group": {"bearer", carol}, "a sluice key of alice's tenant": {"x-api-key", sluiceKey("alice-svc")}} {
			if status, body := send(t, "POST", f.url+"/v1/messages", requestJSON, cred[0], cred[1]); status != http.StatusOK {
				t.Errorf("%s: %d %s", who, status, body)
			}
		}
		st := f.p.budgets.Statuses()
		if len(st) != 3 || st[0].Name != "contractors-day" || *st[0].Members != 2 ||
			st[1].Name != "contractors-day/alice@example.com" || !st[1].Exceeded || st[2].Name != "contractors-day/bob@example.com" || !st[2].Exceeded {
			t.Errorf("the budgets: %+v; want the group budget, then alice's and bob's, both spent", st)
		}
	})
}
