package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/sluicebin"
	"github.com/sluicehq/sluice/keystore"
	"github.com/sluicehq/sluice/sim"
)

// heldUpstreamKey is the key the replicas hold under INBOUND_KEYS_STORE.
const heldUpstreamKey = "sk-ant-held-by-the-replicas-0123456789"

// sluiceCLI runs `sluice args...` against the admin API at admin and
// returns its output.
func sluiceCLI(t *testing.T, admin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(sluicebin.Path(t), args...)
	cmd.Env = append(os.Environ(), "ADMIN_KEY="+killAdminKey, "SLUICE_ADMIN_URL="+admin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// statusWith is the status of a small Messages request to base with key.
func statusWith(t *testing.T, c *http.Client, base, key string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(killBody(1, false)))
	req.Header.Set("X-Api-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Two replicas share one PostgreSQL (INBOUND_KEYS_STORE=1): a key made
// with `sluice keys create` on one is taken by the other, a key revoked
// on one is refused by the other within keystore.PollEvery and a read,
// a budget set on one binds on the other, and the audit names every
// change. The revoke-to-refusal times are logged (-v).
func TestKeysStoreAcrossReplicas(t *testing.T) {
	dsn := pgtest.Start(t)
	s := sim.New(sim.Config{TTFT: time.Millisecond, OutputTokensMin: 8, OutputTokensMax: 8})
	up := httptest.NewServer(s)
	t.Cleanup(func() { up.Close(); s.Close() })
	env := []string{"SPEND_STORE=" + dsn, "DATA_DIR=" + t.TempDir(), "INBOUND_KEYS_STORE=1", "ANTHROPIC_API_KEY=" + heldUpstreamKey, "LOG_LEVEL=info"}
	a, b := startBookProcess(t, "a", up.URL, nil, env...), startBookProcess(t, "b", up.URL, nil, env...)
	c := &http.Client{Timeout: 10 * time.Second}

	const rounds = 10
	var took []time.Duration
	var keys []string
	for i := range rounds {
		out := sluiceCLI(t, a.admin, "keys", "create", "dev"+string(rune('a'+i)), "--tenant", "team-"+string(rune('a'+i)), "--as", "ops-test")
		key := ""
		for _, line := range strings.Split(out, "\n") {
			if k, ok := strings.CutPrefix(line, "key:"); ok {
				key = strings.TrimSpace(k)
			}
		}
		if !strings.HasPrefix(key, "sk-sluice-") {
			t.Fatalf("keys create printed no key:\n%s", out)
		}
		keys = append(keys, key)
		if st := statusWith(t, c, a.url, key); st != http.StatusOK {
			t.Fatalf("a refused the key it just made: %d", st)
		}
		deadline := time.Now().Add(10 * time.Second)
		for statusWith(t, c, b.url, key) != http.StatusOK {
			if time.Now().After(deadline) {
				t.Fatal("b did not take a key made on a within 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		sluiceCLI(t, a.admin, "keys", "revoke", "dev"+string(rune('a'+i)))
		revoked := time.Now()
		if st := statusWith(t, c, a.url, key); st != http.StatusUnauthorized {
			t.Errorf("a, where the key was revoked, answered %d, not 401", st)
		}
		for {
			st := statusWith(t, c, b.url, key)
			if st == http.StatusUnauthorized {
				break
			}
			if time.Since(revoked) > 3*keystore.PollEvery+2*time.Second {
				t.Fatalf("b still takes a key revoked on a %v ago (answered %d)", time.Since(revoked), st)
			}
			time.Sleep(5 * time.Millisecond)
		}
		took = append(took, time.Since(revoked))
	}
	slices.Sort(took)
	t.Logf("revoke on a to refusal on b, %d rounds (PollEvery %v): min %v, median %v, max %v",
		rounds, keystore.PollEvery, took[0].Round(time.Millisecond), took[rounds/2].Round(time.Millisecond), took[rounds-1].Round(time.Millisecond))

	// A budget set through b binds a key of a: tokens, spent at once.
	key := sluiceCLI(t, b.admin, "keys", "create", "capped", "--tenant", "capped")
	capped := strings.TrimSpace(strings.SplitN(strings.SplitN(key, "key:", 2)[1], "\n", 2)[0])
	sluiceCLI(t, b.admin, "budgets", "set", "capped-day", "--key", "capped", "--tokens", "1", "--period", "day")
	deadline := time.Now().Add(10 * time.Second)
	for statusWith(t, c, a.url, capped) != http.StatusPaymentRequired {
		if time.Now().After(deadline) {
			t.Fatal("a did not refuse (402) a key past a budget set on b within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	list := sluiceCLI(t, a.admin, "budgets", "list")
	if !strings.Contains(list, `"capped-day"`) {
		t.Errorf("budgets list lacks the budget set:\n%s", list)
	}
	sluiceCLI(t, a.admin, "budgets", "delete", "capped-day")

	var audit struct {
		Data []keystore.Numbered `json:"data"`
	}
	if err := json.Unmarshal([]byte(sluiceCLI(t, b.admin, "audit", "--limit", "100")), &audit); err != nil {
		t.Fatal(err)
	}
	actions := map[string]int{}
	for _, l := range audit.Data {
		actions[l.Action]++
		if l.Who == "" || l.At.IsZero() {
			t.Errorf("an audit line lacks who or when: %+v", l)
		}
	}
	if actions["key.create"] != rounds+1 || actions["key.revoke"] != rounds || actions["budget.put"] != 1 || actions["budget.delete"] != 1 {
		t.Errorf("the audit holds %v", actions)
	}
	if !strings.HasPrefix(audit.Data[len(audit.Data)-1].Who, "ops-test from 127.0.0.1") {
		t.Errorf("the first change's who is %q, want the --as name and the address", audit.Data[len(audit.Data)-1].Who)
	}

	// No key reaches either replica's log; the changes do.
	for _, p := range []*bookProcess{a, b} {
		p.logMu.Lock()
		log := p.log.Bytes()
		for _, secret := range append(keys, capped, killAdminKey, heldUpstreamKey, dsn) {
			if bytes.Contains(log, []byte(secret)) {
				t.Errorf("%s's log holds a secret", p.name)
			}
		}
		p.logMu.Unlock()
	}
	a.logMu.Lock()
	if !bytes.Contains(a.log.Bytes(), []byte("admin: key.revoke")) {
		t.Error("a's log does not say a key was revoked")
	}
	a.logMu.Unlock()
}
