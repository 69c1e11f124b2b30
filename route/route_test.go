package route

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
)

// noClient is a backend client the router tests never call.
type noClient struct{}

func (noClient) Do(context.Context, *http.Request, io.Reader, int64) (*http.Response, error) {
	panic("not called")
}

// room is a Room whose keys fit at the times it is told, by key hash;
// now when not told.
type room map[string]time.Time

func (r room) FitsAt(key string, _ pace.Cost, now time.Time) time.Time {
	if t, ok := r[key]; ok && t.After(now) {
		return t
	}
	return now
}

var t0 = time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)

// twoKeys is a pool of backends a (keys a/1, a/2) and b (b/1), caps 4.
func twoKeys(t *testing.T, r Room) *Pool {
	t.Helper()
	env := map[string]string{"KA1": "sk-a-one", "KA2": "sk-a-two", "KB1": "sk-b-one"}
	p, err := New([]Spec{
		{Name: "a", Kind: "anthropic", Client: noClient{}, Keys: []string{"env:KA1", "env:KA2"}, Cap: 4},
		{Name: "b", Kind: "anthropic", Client: noClient{}, Keys: []string{"env:KB1"}, Cap: 4},
	}, r, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func desc(session string, prefixes ...uint64) *request.Descriptor {
	d := &request.Descriptor{Session: session, Cost: request.Cost{InputTokens: 5000, MaxTokens: 1000}}
	for _, k := range prefixes {
		d.Prefixes = append(d.Prefixes, request.Prefix{Key: k, Tokens: 4000, TTL: 5 * time.Minute})
	}
	return d
}

func TestNewReadsKeysAndNamesThem(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte("sk-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := New([]Spec{{Name: "main", Kind: "anthropic", Client: noClient{}, Keys: []string{"env:K", "file:" + file}, Cap: 2}},
		nil, func(string) string { return "sk-from-env" })
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Authorization": {"Bearer client"}, "X-Api-Key": {"client"}}
	p.Keys[1].Authorize(h)
	if h.Get("X-Api-Key") != "sk-from-file" || h.Get("Authorization") != "" {
		t.Errorf("after Authorize: %v; want the file's key alone", h)
	}
	if p.Keys[0].String() != "main/1" || p.Keys[1].Lane != 2 {
		t.Errorf("names: %s lane %d", p.Keys[0], p.Keys[1].Lane)
	}
	if p.Keys[0].Hash != request.Tenant(http.Header{"X-Api-Key": {"sk-from-env"}}) {
		t.Errorf("hash %s is not the key's short hash", p.Keys[0].Hash)
	}
}

// TestNewErrorsNeverHoldAKey: each refusal names the backend and the
// reference, and holds no key, even one it read. (Broken on purpose, by
// putting the key in the message, it fails.)
func TestNewErrorsNeverHoldAKey(t *testing.T) {
	dir := t.TempDir()
	twoLines := filepath.Join(dir, "two")
	os.WriteFile(twoLines, []byte("sk-secret-one\nsk-secret-two\n"), 0o600)
	env := map[string]string{"DUP": "sk-secret-one", "DUP2": "sk-secret-one"}
	for _, tc := range []struct {
		name string
		keys []string
		want string
	}{
		{"unset", []string{"env:NOPE"}, "unset or empty"},
		{"two lines", []string{"file:" + twoLines}, "control character"},
		{"missing file", []string{"file:" + filepath.Join(dir, "none")}, "read the key file"},
		{"same key twice", []string{"env:DUP", "env:DUP2"}, "the same key as x/1"},
		// A key pasted where its variable's name belongs.
		{"pasted key", []string{"env:sk-secret-ant-api03-AbCdEf"}, "not a variable name"},
		{"pasted key, twice", []string{"env:DUP", "env:sk-secret-one"}, "not a variable name"},
	} {
		_, err := New([]Spec{{Name: "x", Kind: "anthropic", Client: noClient{}, Keys: tc.keys, Cap: 1}}, nil, func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want it to say %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "sk-secret") {
			t.Errorf("%s: the error holds a key: %v", tc.name, err)
		}
	}
}

// TestAffinityFollowsThePrefix: a request goes where its prefix was
// written, though another key is emptier; a new prefix goes to the least
// loaded key.
func TestAffinityFollowsThePrefix(t *testing.T) {
	p := twoKeys(t, nil)
	first, why := p.Route(Affinity{}, desc("", 7), nil, t0)
	if why != ByRoom {
		t.Fatalf("first of prefix 7: %v; want by room", why)
	}
	for i := range 2 {
		k, why := p.Route(Affinity{}, desc("", 7), nil, t0)
		if k != first || why != ByAffinity {
			t.Errorf("follower %d: %s by %v; want %s by affinity", i, k, why, first)
		}
	}
	other, _ := p.Route(Affinity{}, desc("", 8), nil, t0)
	if other == first {
		t.Errorf("a new prefix went to %s, the loaded key; want an empty one", other)
	}
	// Its longest prefix decides: [7, 9] holds 7 on first.
	if k, why := p.Route(Affinity{}, desc("", 7, 9), nil, t0); k != first || why != ByAffinity {
		t.Errorf("7 then 9: %s by %v; want %s by affinity", k, why, first)
	}
}

// TestAffinityGivesWayToRoom: the key holding the prefix is followed
// only while it takes the request soon enough; past that the request goes
// where there is room, and the prefix is then held on both.
func TestAffinityGivesWayToRoom(t *testing.T) {
	r := room{}
	p := twoKeys(t, r)
	first, _ := p.Route(Affinity{}, desc("", 7), nil, t0)
	r[first.Hash] = t0.Add(p.AffinityWait / 2)
	if k, _ := p.Route(Affinity{}, desc("", 7), nil, t0); k != first {
		t.Errorf("within AffinityWait: went to %s; want %s", k, first)
	}
	r[first.Hash] = t0.Add(p.AffinityWait + time.Millisecond)
	second, why := p.Route(Affinity{}, desc("", 7), nil, t0)
	if second == first || why != ByRoom {
		t.Fatalf("past AffinityWait: %s by %v; want another key by room", second, why)
	}
	delete(r, first.Hash)
	r[second.Hash] = t0.Add(time.Hour)
	if k, why := p.Route(Affinity{}, desc("", 7), nil, t0); k != first || why != ByAffinity {
		t.Errorf("held on both, the second spent: %s by %v; want %s by affinity", k, why, first)
	}
}

// TestAffinityLeavesAFullKey: a key at its cap is not followed while
// another has room.
func TestAffinityLeavesAFullKey(t *testing.T) {
	p := twoKeys(t, nil)
	first, _ := p.Route(Affinity{}, desc("", 7), nil, t0)
	for first.Pending() < first.Backend.Cap {
		p.Route(Affinity{}, desc("", 7), nil, t0)
	}
	if k, _ := p.Route(Affinity{}, desc("", 7), nil, t0); k == first {
		t.Errorf("went to %s at its cap of %d", k, first.Backend.Cap)
	}
}

func TestSessionSticks(t *testing.T) {
	p := twoKeys(t, nil)
	k1, _ := p.Route(Affinity{}, desc("s1"), nil, t0)
	p.Route(Affinity{}, desc("other"), nil, t0)
	for i := range 2 {
		if k, why := p.Route(Affinity{}, desc("s1"), nil, t0.Add(time.Minute)); k != k1 || why != BySession {
			t.Errorf("s1 again (%d): %s by %v; want %s by session", i, k, why, k1)
		}
	}
	if k, why := p.Route(Affinity{}, desc("s1"), nil, t0.Add(time.Minute+sessionTTL+time.Second)); why == BySession {
		t.Errorf("after the session's TTL: %s by session; want it forgotten", k)
	}
}

func TestRoomPicksTheSoonest(t *testing.T) {
	r := room{}
	p := twoKeys(t, r)
	r[p.Keys[0].Hash] = t0.Add(3 * time.Second)
	r[p.Keys[1].Hash] = t0.Add(time.Second)
	r[p.Keys[2].Hash] = t0.Add(2 * time.Second)
	if k, why := p.Route(Affinity{}, desc(""), nil, t0); k != p.Keys[1] || why != ByRoom {
		t.Errorf("%s by %v; want a/2, which fits soonest", k, why)
	}
}

// TestHealthSkipsAndProbesBack: a failing key is skipped for a time that
// doubles with each failure in a row, then tried again; an unreachable
// backend is skipped whole; one success heals.
func TestHealthSkipsAndProbesBack(t *testing.T) {
	p := twoKeys(t, nil)
	a1, a2, b1 := p.Keys[0], p.Keys[1], p.Keys[2]
	p.Answered(a1, 529, t0)
	if a1.Healthy(t0.Add(firstSkip-time.Millisecond)) || !a1.Healthy(t0.Add(firstSkip)) {
		t.Errorf("after one 529: skipped for %v, then tried", firstSkip)
	}
	// Failures of calls in flight when the skip began do not grow it.
	for range 5 {
		p.Answered(a1, 529, t0.Add(time.Millisecond))
	}
	if !a1.Healthy(t0.Add(firstSkip)) {
		t.Error("concurrent failures during the skip grew it")
	}
	p.Answered(a1, 503, t0.Add(firstSkip))
	if a1.Healthy(t0.Add(firstSkip + 2*firstSkip - time.Millisecond)) {
		t.Error("after a second failure in a row: want twice the skip")
	}
	at := t0.Add(firstSkip)
	for range 20 { // each failure as the key is tried again
		_, until := a1.health.fail(a1.health.skippedUntil())
		at = until
	}
	p.Answered(a1, 529, at)
	if until := a1.health.skippedUntil(); until.Sub(at) != maxSkip {
		t.Errorf("skip after many failures in a row: %v; want it capped at %v", until.Sub(at), maxSkip)
	}
	p.Answered(a1, 200, t0)
	if !a1.Healthy(t0) {
		t.Error("a success did not heal it")
	}
	p.Answered(a2, 0, t0) // unreachable: its backend, a, is skipped whole
	if a1.Healthy(t0) || a2.Healthy(t0) || !b1.Healthy(t0) {
		t.Error("an unreachable key must skip its whole backend, and only it")
	}
	for range 3 {
		if k, _ := p.Route(Affinity{}, desc(""), nil, t0); k != b1 {
			t.Errorf("routed to %s while a is skipped; want b/1", k)
		}
	}
	p.Answered(b1, 429, t0) // a 429 is the buckets' business
	if !b1.Healthy(t0) {
		t.Error("a 429 made the key unhealthy")
	}
	p.Answered(b1, 403, t0) // may be about the request alone
	if !b1.Healthy(t0) {
		t.Error("a 403 made the key unhealthy")
	}
	p.Answered(b1, 401, t0) // the key itself refused
	if b1.Healthy(t0) {
		t.Error("a 401 on a held key left it healthy")
	}
	p.Answered(b1, 200, t0)
	p.Answered(b1, 0, t0)
	// Every key skipped: the one back soonest is still tried.
	if k, _ := p.Route(Affinity{}, desc(""), nil, t0); k == nil {
		t.Error("every key skipped: routed nowhere; want the one back soonest")
	}
}

// TestAvoidAndAllowed: a retry avoids the keys that failed it while
// another may take it; an inbound key limited to backends goes only there.
func TestAvoidAndAllowed(t *testing.T) {
	p := twoKeys(t, nil)
	a1, b1 := p.Keys[0], p.Keys[2]
	onlyB := &request.Descriptor{Inbound: &request.Inbound{Backends: []string{"b"}}}
	for range 3 {
		if k, _ := p.Route(Affinity{}, onlyB, nil, t0); k != b1 {
			t.Fatalf("limited to b: went to %s", k)
		}
	}
	// Its one key failed it: tried again there, since there is no other.
	if k, _ := p.Route(Affinity{}, onlyB, []*Key{b1}, t0); k != b1 {
		t.Errorf("limited to b, b/1 avoided: %s; want b/1 again", k)
	}
	if k, _ := p.Route(Affinity{}, desc(""), []*Key{a1}, t0); k == a1 {
		t.Error("routed back to the key it avoids, with others free")
	}
	none := &request.Descriptor{Inbound: &request.Inbound{Backends: []string{"gone"}}}
	if k, _ := p.Route(Affinity{}, none, nil, t0); k != nil {
		t.Errorf("limited to no backend of the pool: %s; want none", k)
	}
}

// TestRoutersConformance holds every router to what the pool relies on:
// it picks one of the candidates it is given, alone or among many, and
// spreads requests that nothing ties to a key over all of them.
func TestRoutersConformance(t *testing.T) {
	for name, r := range map[string]Router{"affinity": Affinity{}, "round-robin": &RoundRobin{}} {
		t.Run(name, func(t *testing.T) {
			p := twoKeys(t, nil)
			if c := r.Choose(p, desc(""), p.Keys[1:2], t0); c.Key != p.Keys[1] || c.Why != OnlyOne {
				t.Errorf("one candidate: %v; want it, as the only one", c)
			}
			seen := map[*Key]int{}
			for i := range 30 {
				k, _ := p.Route(r, desc(""), nil, t0)
				if k == nil || !contains(p.Keys, k) {
					t.Fatalf("request %d: %v, not a key of the pool", i, k)
				}
				seen[k]++
			}
			for _, k := range p.Keys {
				if seen[k] != 10 {
					t.Errorf("%s took %d of 30 requests; want 10 (even spread)", k, seen[k])
				}
				for range seen[k] {
					p.Done(k)
				}
				if k.Pending() != 0 {
					t.Errorf("%s: %d pending after every Done", k, k.Pending())
				}
			}
		})
	}
}

// gathered is the text of every series reg holds.
func gathered(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, mf := range mfs {
		all.WriteString(mf.String())
	}
	return all.String()
}

// leakedKeys are the pool's test keys text holds.
func leakedKeys(text string) []string {
	var out []string
	for _, secret := range []string{"sk-a-one", "sk-a-two", "sk-b-one"} {
		if strings.Contains(text, secret) {
			out = append(out, secret)
		}
	}
	return out
}

// TestMetricsNameNoKey: the metrics and the rows name each key by its
// backend and place, never by the key; the check finds a key planted in
// a series on purpose.
func TestMetricsNameNoKey(t *testing.T) {
	p := twoKeys(t, nil)
	k, _ := p.Route(Affinity{}, desc("s", 1), nil, t0)
	p.Answered(k, 529, t0)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p)
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Fatalf("gather: %d series, %v", n, err)
	}
	text := gathered(t, reg)
	if leaked := leakedKeys(text); len(leaked) > 0 {
		t.Errorf("keys in the metrics: %v", leaked)
	}
	if !strings.Contains(text, `value:"a/1"`) {
		t.Error("the metrics do not name key a/1")
	}
	for _, r := range p.Rows() {
		if leaked := leakedKeys(fmt.Sprintf("%+v", r)); len(leaked) > 0 {
			t.Errorf("a row holds a key: %v", leaked)
		}
	}
	// Broken on purpose: a series labelled with a key is found.
	planted := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "planted", Help: "a series labelled with a key"}, []string{"key"})
	planted.WithLabelValues(p.Keys[1].secret).Set(1)
	reg.MustRegister(planted)
	if leaked := leakedKeys(gathered(t, reg)); len(leaked) != 1 || leaked[0] != "sk-a-two" {
		t.Errorf("the check found %v in a series labelled with sk-a-two; it cannot catch a leak", leaked)
	}
}

// TestRememberedIsBounded: a flood of new prefixes and sessions keeps each
// map within its bound.
func TestRememberedIsBounded(t *testing.T) {
	p := twoKeys(t, nil)
	k := p.Keys[0]
	for i := range maxRemembered + 1000 {
		p.affinity.wrote([]request.Prefix{{Key: uint64(i), Tokens: 1, TTL: time.Hour}}, k, t0)
		p.sessions.went("s"+strconv.Itoa(i), k, time.Now())
	}
	if n := len(p.affinity.m); n > maxRemembered {
		t.Errorf("%d prefixes remembered; want at most %d", n, maxRemembered)
	}
	if n := len(p.sessions.m); n > maxRemembered {
		t.Errorf("%d sessions remembered; want at most %d", n, maxRemembered)
	}
}

// TestRouteSaysWhetherTheKeyHeldThePrefix: the first request of a prefix
// finds its key cold; a follower routed there finds it held; one routed
// elsewhere by room finds that key cold.
func TestRouteSaysWhetherTheKeyHeldThePrefix(t *testing.T) {
	r := room{}
	p := twoKeys(t, r)
	first, _, held := p.route(Affinity{}, desc("", 7), nil, t0)
	if held {
		t.Error("the prefix's first request found its key holding it")
	}
	if k, _, held := p.route(Affinity{}, desc("", 7), nil, t0); k != first || !held {
		t.Errorf("a follower: %s, held %v; want %s, held", k, held, first)
	}
	r[first.Hash] = t0.Add(time.Hour)
	if k, _, held := p.route(Affinity{}, desc("", 7), nil, t0); k == first || held {
		t.Errorf("sent elsewhere by room: %s, held %v; want another key, cold", k, held)
	}
}

// TestOneProbeAfterASkip: once a failing key's skip is over, one request
// goes to it as its probe, and the others elsewhere until it answers; a
// probe that never reports frees the key for another after probeWindow.
func TestOneProbeAfterASkip(t *testing.T) {
	p := twoKeys(t, nil)
	a1 := p.Keys[0]
	p.Answered(a1, 529, t0)
	back := t0.Add(firstSkip)
	// a/1 is emptiest (nothing pending anywhere): the probe goes there.
	if k, _ := p.Route(Affinity{}, desc(""), nil, back); k != a1 {
		t.Fatalf("first request after the skip went to %s; want a/1, as its probe", k)
	}
	p.Done(a1)
	for i := range 3 {
		if k, _ := p.Route(Affinity{}, desc(""), nil, back); k == a1 {
			t.Errorf("request %d went to a/1 while its probe is out", i)
		} else {
			p.Done(k)
		}
	}
	if k, _ := p.Route(Affinity{}, desc(""), nil, back.Add(probeWindow)); k != a1 {
		t.Errorf("after the probe window, %s; want a/1 probed again", k)
	}
	p.Done(a1)
	p.Answered(a1, 200, back.Add(probeWindow))
	if !a1.Healthy(back.Add(probeWindow)) {
		t.Error("a/1 not healthy after its probe succeeded")
	}
}
