package tenants

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIdentify(t *testing.T) {
	const keyTenant = "0123456789abcdef"
	hdr := http.Header{TenantHeader: {" team-a "}, PriorityHeader: {"Batch"}}
	in := &request.Inbound{Name: "ci-key", Tenant: "ci"}
	for _, tc := range []struct {
		from    string
		h       http.Header
		inbound *request.Inbound
		userID  string
		want    string
		class   request.Class
	}{
		{TenantFromKey, hdr, nil, "u1", keyTenant, request.ClassBatch},
		{TenantFromKey, hdr, in, "u1", "ci", request.ClassBatch}, // with inbound keys, the sluice key it brings
		{TenantFromHeader, hdr, nil, "u1", "team-a", request.ClassBatch},
		{TenantFromHeader, http.Header{}, nil, "u1", keyTenant, request.ClassInteractive},
		{TenantFromMetadata, nil, nil, "u1", "u1", request.ClassInteractive},
		{TenantFromMetadata, nil, nil, "", keyTenant, request.ClassInteractive},
		{TenantFromSession, http.Header{SessionHeader: {"s-hdr"}}, nil, `{"session_id":"s-meta"}`, "s-hdr", request.ClassInteractive},
		{TenantFromSession, nil, nil, `{"device_id":"d","account_uuid":"","session_id":"s-meta"}`, "s-meta", request.ClassInteractive},
		{TenantFromSession, nil, nil, "u1", keyTenant, request.ClassInteractive},                           // a user_id that is not Claude Code's
		{TenantFromSession, http.Header{SessionHeader: {"s-hdr"}}, in, "", "ci", request.ClassInteractive}, // the inbound key binds
		{TenantFromInbound, nil, in, "", "ci", request.ClassInteractive},
		{TenantFromInbound, nil, &request.Inbound{Name: "ci-key"}, "", "ci-key", request.ClassInteractive},
		{TenantFromInbound, nil, nil, "", keyTenant, request.ClassInteractive}, // no inbound key: the credential's
		// The developer Anthropic's gateway signed in: the email (decoded
		// from the gateway's percent-encoding), else the IdP subject; a
		// request naming none is its inbound key's (the gateway's).
		{TenantFromGateway, http.Header{GatewayUserEmailHeader: {"jos%C3%A9@example.com"}, GatewayUserIDHeader: {"sub-1"}}, &request.Inbound{Name: "claude-gateway"}, "u1", "josé@example.com", request.ClassInteractive},
		// A key with a tenant of its own (a developer's) names no one
		// else: bob's key cannot charge ana.
		{TenantFromGateway, http.Header{GatewayUserEmailHeader: {"ana@example.com"}}, &request.Inbound{Name: "bob", Tenant: "bob@example.com"}, "u1", "bob@example.com", request.ClassInteractive},
		{TenantFromGateway, http.Header{GatewayUserIDHeader: {" sub-1 "}}, nil, "", "sub-1", request.ClassInteractive},
		{TenantFromGateway, http.Header{GatewayUserEmailHeader: {"100%"}}, nil, "", "100%", request.ClassInteractive}, // not the gateway's encoding: kept as sent
		{TenantFromGateway, http.Header{TenantHeader: {"team-a"}}, in, "u1", "ci", request.ClassInteractive},
		{TenantFromGateway, nil, nil, "u1", keyTenant, request.ClassInteractive},
		// The key's class wins over a header that asks for more.
		{TenantFromInbound, http.Header{PriorityHeader: {"interactive"}}, &request.Inbound{Name: "n", Class: request.ClassBatch}, "", "n", request.ClassBatch},
	} {
		d := request.Descriptor{Tenant: keyTenant, UserID: tc.userID, Inbound: tc.inbound}
		d.Tenant, d.Class = New(Config{From: tc.from}).Identify(d, tc.h)
		if d.Tenant != tc.want || d.Class != tc.class {
			t.Errorf("TENANT_FROM=%s, header %v, inbound %+v: tenant %q class %q; want %q %q", tc.from, tc.h, tc.inbound, d.Tenant, d.Class, tc.want, tc.class)
		}
	}
	long := http.Header{TenantHeader: {string(make([]byte, 1000))}}
	d := request.Descriptor{Tenant: keyTenant}
	d.Tenant, _ = New(Config{From: TenantFromHeader}).Identify(d, long)
	if len(d.Tenant) > request.MaxUserID {
		t.Errorf("a header tenant of %d bytes kept", len(d.Tenant))
	}
	long = http.Header{GatewayUserEmailHeader: {strings.Repeat("%FF", 400)}}
	d = request.Descriptor{Tenant: keyTenant}
	d.Tenant, _ = New(Config{From: TenantFromGateway}).Identify(d, long)
	if len(d.Tenant) > request.MaxUserID || !utf8.ValidString(d.Tenant) {
		t.Errorf("a gateway tenant of %d bytes kept (valid UTF-8: %v)", len(d.Tenant), utf8.ValidString(d.Tenant))
	}
}

// At most Max tenants are tracked: a new one takes an idle one's place,
// and shares OtherTenant while every tracked one is busy.
func TestTenantsBounded(t *testing.T) {
	ts := New(Config{Max: 2})
	enter := func(name string) dispatch.Tenant {
		t.Helper()
		tn, err := ts.Enter(&request.Descriptor{Tenant: name})
		if err != nil {
			t.Fatal(err)
		}
		return tn
	}
	a, b := enter("a"), enter("b")
	if c := enter("c"); c.Name() != OtherTenant {
		t.Errorf("a third tenant with two busy is %q; want %q", c.Name(), OtherTenant)
	}
	ts.Granted(a, &request.Descriptor{})
	ts.Done(a) // a is idle now: c may take its place
	if c := enter("c"); c.Name() != "c" {
		t.Errorf("a new tenant with one idle is %q; want its own", c.Name())
	}
	if got := enter("a"); got.Name() != OtherTenant {
		t.Errorf("the replaced tenant, coming back with both busy, is %q; want %q", got.Name(), OtherTenant)
	}
	ts.Left(b, &request.Descriptor{})
	names := map[string]dispatch.TenantStats{}
	for _, st := range ts.Stats() {
		names[st.Tenant] = st
	}
	if len(names) != 3 || names[OtherTenant].Waiting != 2 || names["c"].Waiting != 1 || names["b"].Waiting != 0 {
		t.Errorf("stats %+v; want other (2 waiting), b (none) and c (1)", names)
	}
	// Many tenants, one at a time: the map never grows past Max.
	for i := range 1000 {
		tn := enter(strconv.Itoa(i))
		ts.Left(tn, &request.Descriptor{})
	}
	if n := len(ts.known); n > 2 {
		t.Errorf("%d tenants tracked; want at most 2", n)
	}
}

// A tenant past its MaxWaiting is refused at once; others are admitted,
// and the tenant is admitted again once one of its requests got a slot.
func TestTenantMaxWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := gate.New(gate.Fixed(1), gate.NewFair(0))
		if err != nil {
			t.Fatal(err)
		}
		tenants := New(Config{MaxWaiting: 2})
		s, err := dispatch.New(dispatch.Config{MaxSize: 1, Timeout: time.Minute, Tenants: tenants}, g, dispatch.Hooks{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		release := make(chan struct{})
		hold := func(context.Context, *dispatch.Member) error { <-release; return nil }
		errs := make(chan error, 10)
		do := func(tenant string) {
			go func() { errs <- s.Do(context.Background(), &request.Descriptor{Tenant: tenant}, hold) }()
			synctest.Wait()
		}
		for range 3 { // one holds the slot, two wait: a's limit
			do("a")
		}
		err = s.Do(context.Background(), &request.Descriptor{Tenant: "a"}, hold)
		var full *dispatch.TenantFullError
		if !errors.As(err, &full) || full.Tenant != "a" || full.Max != 2 {
			t.Fatalf("a's fourth: %v; want a *dispatch.TenantFullError for a, max 2", err)
		}
		do("b") // b is admitted, and waits
		if q := s.Queued(); q != 3 {
			t.Errorf("queued %d; want 3 (a's two, b's one)", q)
		}
		close(release)
		for range 4 {
			if err := <-errs; err != nil {
				t.Errorf("an admitted request failed: %v", err)
			}
		}
		for _, st := range tenants.Stats() {
			if st.Waiting != 0 || st.InFlight != 0 {
				t.Errorf("after: %+v; want nothing waiting or in flight", st)
			}
			if want := map[string]int64{"a": 3, "b": 1}[st.Tenant]; st.Served != want {
				t.Errorf("tenant %q served %d; want %d", st.Tenant, st.Served, want)
			}
		}
	})
}

// A member's ticket carries its tenant, its cost, its class and its
// weight and limit, from the configuration or its inbound key.
func TestTenantTicket(t *testing.T) {
	ts := New(Config{Weights: map[string]float64{"a": 3}, MaxConcurrent: 4})
	r := &request.Descriptor{Tenant: "a", Class: request.ClassBatch, Cost: request.Cost{InputTokens: 100, MaxTokens: 1000}}
	tn, _ := ts.Enter(r)
	var tk gate.Ticket
	ts.Ticket(&tk, tn, r)
	if tk.Key != "a" || tk.Cost != 1100 || tk.Class != gate.ClassBatch || tk.Weight != 3 || tk.MaxInFlight != 4 {
		t.Errorf("ticket %+v; want key a, cost 1100, batch, weight 3, max 4", tk)
	}
	r.Inbound = &request.Inbound{Weight: 0.5, MaxConcurrent: 1}
	ts.Ticket(&tk, tn, r)
	if tk.Weight != 0.5 || tk.MaxInFlight != 1 {
		t.Errorf("with an inbound key: weight %v max %d; want the key's 0.5, 1", tk.Weight, tk.MaxInFlight)
	}
}
