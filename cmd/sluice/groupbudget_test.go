package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/oidctest"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/sluicebin"
	"github.com/sluicehq/sluice/keystore"
	"github.com/sluicehq/sluice/sim"
)

// statusAs is the status of a small Messages request to base with an
// identity provider's token.
func statusAs(t *testing.T, c *http.Client, base, token string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(killBody(1, false)))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A budget on an identity provider's group, set with `sluice budgets set
// --group` through one of two replicas sharing PostgreSQL, binds every
// member of the group on their own, on both replicas: alice, past it on
// a, is refused on b too, while bob, of the same group, is answered
// until he spends his own; `sluice budgets list` names the group budget
// and each member's, and the audit the change.
func TestGroupBudgetSetFromTheCLIAcrossReplicas(t *testing.T) {
	dsn := pgtest.Start(t)
	idp := oidctest.Start(t)
	alice := idp.Token(t, oidctest.User{Subject: "u-alice", Email: "alice@example.com", Groups: []string{"contractors"}}).ID
	bob := idp.Token(t, oidctest.User{Subject: "u-bob", Email: "bob@example.com", Groups: []string{"eng", "contractors"}}).ID
	s := sim.New(sim.Config{TTFT: time.Millisecond, OutputTokensMin: 8, OutputTokensMax: 8})
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	env := []string{"SPEND_STORE=" + dsn, "DATA_DIR=" + t.TempDir(), "INBOUND_KEYS_STORE=1", "ANTHROPIC_API_KEY=" + heldUpstreamKey, "LOG_LEVEL=info",
		"OIDC_ISSUER=" + idp.Issuer(), "OIDC_AUDIENCE=" + oidctest.ClientID}
	a, b := startBookProcess(t, "a", up.URL, nil, env...), startBookProcess(t, "b", up.URL, nil, env...)
	c := &http.Client{Timeout: 10 * time.Second}

	if st := statusAs(t, c, a.url, alice); st != http.StatusOK {
		t.Fatalf("alice before any budget: %d", st)
	}
	sluiceCLI(t, b.admin, "budgets", "set", "contractors-day", "--group", "contractors", "--tokens", "1", "--period", "day", "--as", "ops-test")
	// In force on a within a poll; alice's answer above is in the books,
	// so her own budget starts spent.
	// waitStatus waits for want, the status before the change (200 or
	// 402) meanwhile.
	waitStatus := func(what, base, token string, want int) {
		t.Helper()
		was := http.StatusOK
		if want == http.StatusOK {
			was = http.StatusPaymentRequired
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := statusAs(t, c, base, token)
			if st == want {
				return
			}
			if st != was || time.Now().After(deadline) {
				t.Fatalf("%s: %d, want %d within 10 s", what, st, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitStatus("alice on a, past the group budget set on b", a.url, alice, http.StatusPaymentRequired)
	waitStatus("alice on b", b.url, alice, http.StatusPaymentRequired)
	if st := statusAs(t, c, b.url, bob); st != http.StatusOK {
		t.Fatalf("bob, of the same group, his own budget whole: %d", st)
	}
	waitStatus("bob on a, past his own budget spent on b", a.url, bob, http.StatusPaymentRequired)

	var list struct {
		Data []struct {
			Name, Tenant, Group string
			Members             *int
			Exceeded            bool
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(sluiceCLI(t, a.admin, "budgets", "list")), &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range list.Data {
		got[r.Name] = true
		switch r.Name {
		case "contractors-day":
			if r.Group != "contractors" || r.Members == nil || *r.Members != 2 {
				t.Errorf("the group budget's row %+v", r)
			}
		case "contractors-day/alice@example.com", "contractors-day/bob@example.com":
			if r.Group != "contractors" || !r.Exceeded || !strings.HasSuffix(r.Name, "/"+r.Tenant) {
				t.Errorf("a member's row %+v", r)
			}
		}
	}
	if !got["contractors-day"] || !got["contractors-day/alice@example.com"] || !got["contractors-day/bob@example.com"] {
		t.Errorf("budgets list: %+v; want the group budget and alice's and bob's", list.Data)
	}

	sluiceCLI(t, a.admin, "budgets", "delete", "contractors-day")
	waitStatus("alice on b, the group budget deleted", b.url, alice, http.StatusOK)
	var audit struct {
		Data []keystore.Numbered `json:"data"`
	}
	if err := json.Unmarshal([]byte(sluiceCLI(t, b.admin, "audit", "--limit", "10")), &audit); err != nil {
		t.Fatal(err)
	}
	if len(audit.Data) != 2 || audit.Data[1].Action != "budget.put" || audit.Data[1].Target != "contractors-day" ||
		!strings.Contains(audit.Data[1].Detail, `"scope":"group"`) || !strings.Contains(audit.Data[1].Detail, `"target":"contractors"`) ||
		!strings.HasPrefix(audit.Data[1].Who, "ops-test from 127.0.0.1") || audit.Data[0].Action != "budget.delete" {
		t.Errorf("the audit: %+v", audit.Data)
	}
	if out, err := sluiceCLIErr(t, a.admin, "budgets", "set", "x", "--group", "g", "--tenant", "t", "--usd", "1", "--period", "day"); err == nil ||
		!strings.Contains(out, "give one of --key") || !strings.Contains(out, "--group") {
		t.Errorf("--group with --tenant: %v %s", err, out)
	}
}

// sluiceCLIErr is sluiceCLI for a command that may fail: its output and
// its error.
func sluiceCLIErr(t *testing.T, admin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(sluicebin.Path(t), args...)
	cmd.Env = append(os.Environ(), "ADMIN_KEY="+killAdminKey, "SLUICE_ADMIN_URL="+admin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
