package bulk

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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

// Issue 37: a budget binds bulk work from its acceptance, not from its
// results. 40 requests submitted at once against a $0.001 day budget: each
// is held at its estimated cost (its prompt and max_tokens, at the batch
// price) when it is accepted, so only those that fit are accepted and the
// rest are refused with a 402 before they are stored or sent; the holds
// are given back as the results are counted, and what the results spent
// stays within the budget.
func TestBulkSubmissionsHeldAgainstTheBudget(t *testing.T) {
	const limit = 0.001
	sp := budget.Spec{Tenant: SpendTenant, Unit: budget.USD, Limit: limit, Period: budget.Day}
	if err := sp.Check(); err != nil {
		t.Fatal(err)
	}
	set, err := budget.New([]budget.Spec{sp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ledger := spend.New(nil, 10)
	ledger.Tell(set)
	h := newHarness(t, Config{DataDir: t.TempDir(), Secret: "s", Spend: ledger, Budgets: set})
	var accepted []string
	var refused, estimated int
	for i := range 40 {
		code, _, v := h.post(testKey, msgBody(fmt.Sprintf("request %d", i)))
		switch code {
		case http.StatusAccepted:
			accepted = append(accepted, v["id"].(string))
		case http.StatusPaymentRequired:
			refused++
			e, _ := v["error"].(map[string]any)
			// The estimate's refusal; or, once results have come meanwhile
			// (a slow machine), the spent budget's.
			msg, _ := e["message"].(string)
			if strings.Contains(msg, "estimated cost") && strings.Contains(msg, "nothing was submitted") {
				estimated++
			} else if !strings.Contains(msg, "is spent") {
				t.Errorf("a submission that does not fit: %v", v)
			}
			if e["type"] != "billing_error" {
				t.Errorf("a submission that does not fit: %v", v)
			}
		default:
			t.Fatalf("submission %d: %d %v", i, code, v)
		}
	}
	st := set.Statuses()[0]
	t.Logf("40 submitted against a $%v budget: %d accepted, %d refused (%d for their estimate); held $%.6f, spent $%.6f", limit, len(accepted), refused, estimated, st.Held, st.Spent)
	if len(accepted) == 0 || len(accepted) == 40 || estimated == 0 || st.Held+st.Spent > limit {
		t.Fatalf("%d of 40 accepted, %d refused for their estimate, $%v held and $%v spent: want those that fit, held within the limit", len(accepted), estimated, st.Held, st.Spent)
	}
	for _, id := range accepted {
		if v := h.await(id); resultType(v) != "succeeded" {
			t.Errorf("%s: %v", id, v)
		}
	}
	st = set.Statuses()[0]
	t.Logf("after the results: spent $%.6f, held $%.6f", st.Spent, st.Held)
	if st.Held != 0 || st.Spent <= 0 || st.Spent > limit {
		t.Errorf("after the results: spent $%v, held $%v; want the results' spend within $%v and nothing held", st.Spent, st.Held, limit)
	}
}

// A person signed in through the identity provider (budget.Member in the
// request's context, as sluice's inbound keys put it there) is held to
// their own budget of their group's budget on the bulk endpoint: refused
// once past it, their estimate held against it while it runs; another
// member, and a sluice key (no member), go on.
func TestBulkSubmissionsBoundByTheMembersGroupBudget(t *testing.T) {
	sp := budget.Spec{Name: "contractors-day", Group: "contractors", Unit: budget.USD, Limit: 0.01, Period: budget.Day}
	if err := sp.Check(); err != nil {
		t.Fatal(err)
	}
	set, err := budget.New([]budget.Spec{sp}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Config{DataDir: t.TempDir(), Secret: "s", MaxWait: time.Hour, Budgets: set})
	post := func(m budget.Member) (int, string) {
		req := httptest.NewRequest("POST", "/v1/bulk/messages", strings.NewReader(msgBody("hello")))
		req.Header.Set("x-api-key", testKey)
		rec := httptest.NewRecorder()
		h.svc.ServeHTTP(rec, req.WithContext(budget.WithMember(req.Context(), m)))
		return rec.Code, rec.Body.String()
	}
	alice := budget.Member{Tenant: "alice@example.com", Groups: []string{"contractors"}}
	bob := budget.Member{Tenant: "bob@example.com", Groups: []string{"contractors"}}
	if code, body := post(alice); code != http.StatusAccepted {
		t.Fatalf("alice's first submission: %d %s", code, body)
	}
	set.Spent(spend.Entry{Key: spend.Key{Tenant: alice.Tenant, Model: "m"}, USD: 0.01})
	if code, body := post(alice); code != http.StatusPaymentRequired || !strings.Contains(body, "contractors-day/alice@example.com") || !strings.Contains(body, "billing_error") {
		t.Errorf("alice past her budget: %d %s", code, body)
	}
	if code, body := post(bob); code != http.StatusAccepted {
		t.Errorf("bob, of the same group: %d %s", code, body)
	}
	if code, body := post(budget.Member{}); code != http.StatusAccepted {
		t.Errorf("a sluice key: %d %s", code, body)
	}
	var bobs budget.Status
	for _, st := range set.Statuses() {
		if st.Name == "contractors-day/bob@example.com" {
			bobs = st
		}
	}
	if bobs.Held <= 0 || bobs.Held >= 0.01 {
		t.Errorf("bob's budget %+v: want his submission's estimate held", bobs)
	}
}
