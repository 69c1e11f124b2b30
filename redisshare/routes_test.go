package redisshare

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisconn"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/route"
)

type noClient struct{}

func (noClient) Do(context.Context, *http.Request, io.Reader, int64) (*http.Response, error) {
	panic("not called")
}

// routesPool is one replica's pool of keys x/1 and x/2, sharing its news
// on srv under name.
func routesPool(t *testing.T, url, name string) *route.Pool {
	t.Helper()
	env := map[string]string{"A": "sk-a", "B": "sk-b"}
	p, err := route.New([]route.Spec{{Name: "x", Kind: "anthropic", Client: noClient{}, Keys: []string{"env:A", "env:B"}, Cap: 4}},
		nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	p.ShareWith(NewRoutes(redistest.Open(t, url, redisconn.Options{}), name))
	return p
}

// within polls cond for up to 5 s.
func within(cond func() bool) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return false
}

// TestRoutesSharedAcrossReplicas: a prefix one replica routed to a key is
// followed there by another replica, which would have chosen otherwise;
// a key one replica found failing is skipped by the other, and healed on
// both.
func TestRoutesSharedAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	name := redistest.Name()
	a, b := routesPool(t, srv.URL, name), routesPool(t, srv.URL, name)
	time.Sleep(50 * time.Millisecond) // both subscribed
	// On b, x/1 is loaded: a new prefix would go to x/2 by room.
	if k, _ := b.Route(route.Affinity{}, &request.Descriptor{}, nil, time.Now()); k != b.Keys[0] {
		t.Fatalf("b's first request went to %s", k)
	}
	prefixed := &request.Descriptor{Prefixes: []request.Prefix{{Key: 0xfeed, Tokens: 4000, TTL: 5 * time.Minute}}}
	if c := (route.Affinity{}).Choose(b, prefixed, b.Keys, time.Now()); c.Key != b.Keys[1] || c.Why != route.ByRoom {
		t.Fatalf("before any news, b would choose %s by %v; want x/2 by room", c.Key, c.Why)
	}
	if k, _ := a.Route(route.Affinity{}, prefixed, nil, time.Now()); k != a.Keys[0] {
		t.Fatalf("a routed the prefix to %s; want x/1", k)
	}
	if !within(func() bool {
		c := (route.Affinity{}).Choose(b, prefixed, b.Keys, time.Now())
		return c.Key == b.Keys[0] && c.Why == route.ByAffinity
	}) {
		t.Error("b never followed the prefix a wrote on x/1")
	}
	a.Answered(a.Keys[1], 529, time.Now())
	if !within(func() bool { return !b.Keys[1].Healthy(time.Now()) }) {
		t.Error("b never skipped x/2, which failed on a")
	}
	a.Answered(a.Keys[1], 200, time.Now())
	if !within(func() bool { return b.Keys[1].Healthy(time.Now()) }) {
		t.Error("b never healed x/2, which a found healthy again")
	}
}
