package budget

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/spend"
)

func mustSet(t *testing.T, log *slog.Logger, specs ...Spec) *Set {
	t.Helper()
	for i := range specs {
		if err := specs[i].Check(); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(specs, log)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func tenantReq(tenant string) *request.Descriptor { return &request.Descriptor{Tenant: tenant} }

func spendUSD(s *Set, tenant string, usd float64) {
	s.Spent(spend.Entry{Key: spend.Key{Tenant: tenant, Inbound: "k", Model: "m"}, USD: usd, Tokens: 1})
}

// refusal is Refuse's answer as the client's error, failing the test if
// it is not a 402 billing_error that says not to retry.
func refusal(t *testing.T, s *Set, r *request.Descriptor) *apierror.Error {
	t.Helper()
	err := s.Refuse(r)
	if err == nil {
		return nil
	}
	var ae *apierror.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusPaymentRequired || ae.Type != "billing_error" || !ae.NoRetry {
		t.Fatalf("refusal %#v, want a 402 billing_error with NoRetry", err)
	}
	return ae
}

// resetsAt checks that a spent budget of tenant refuses until just before
// want and admits from want on, the test's clock starting before want.
func resetsAt(t *testing.T, s *Set, tenant string, want time.Time) {
	t.Helper()
	if refusal(t, s, tenantReq(tenant)) == nil {
		t.Fatal("a spent budget admitted a request")
	}
	time.Sleep(time.Until(want) - time.Second)
	if refusal(t, s, tenantReq(tenant)) == nil {
		t.Fatalf("admitted at %s, a second before the reset %s", time.Now().UTC(), want.UTC())
	}
	time.Sleep(time.Second)
	if e := refusal(t, s, tenantReq(tenant)); e != nil {
		t.Fatalf("still refused at the reset %s: %s", time.Now().UTC(), e.Message)
	}
}

func TestPeriodResets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   Spec
		offset time.Duration // from the bubble's start, 2000-01-01 00:00 UTC (a Saturday), before spending
		want   time.Time
	}{
		{"day at UTC midnight", Spec{Tenant: "a", Limit: 1, Period: Day}, 13 * time.Hour, time.Date(2000, 1, 2, 0, 0, 0, 0, time.UTC)},
		{"week at Monday's midnight", Spec{Tenant: "a", Limit: 1, Period: Week}, 13 * time.Hour, time.Date(2000, 1, 3, 0, 0, 0, 0, time.UTC)},
		{"month on the 1st", Spec{Tenant: "a", Limit: 1, Period: Month}, 13 * time.Hour, time.Date(2000, 2, 1, 0, 0, 0, 0, time.UTC)},
		{"leap February's month", Spec{Tenant: "a", Limit: 1, Period: Month}, 45 * 24 * time.Hour, time.Date(2000, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"day at New York's midnight", Spec{Tenant: "a", Limit: 1, Period: Day, Zone: zone(t, "America/New_York")}, 13 * time.Hour,
			time.Date(2000, 1, 2, 5, 0, 0, 0, time.UTC)}, // EST, UTC-5
		{"day at Kolkata's midnight", Spec{Tenant: "a", Limit: 1, Period: Day, Zone: zone(t, "Asia/Kolkata")}, 13 * time.Hour,
			time.Date(2000, 1, 1, 18, 30, 0, 0, time.UTC)}, // UTC+5:30
		// Berlin moves to summer time at 02:00 on 2000-03-26: that day is
		// 23 hours long, and the next midnight is 22:00 UTC, not 23:00.
		{"day after DST starts", Spec{Tenant: "a", Limit: 1, Period: Day, Zone: zone(t, "Europe/Berlin")},
			time.Date(2000, 3, 25, 23, 30, 0, 0, time.UTC).Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)),
			time.Date(2000, 3, 26, 22, 0, 0, 0, time.UTC)},
		// and back at 03:00 on 2000-10-29: 25 hours.
		{"day after DST ends", Spec{Tenant: "a", Limit: 1, Period: Day, Zone: zone(t, "Europe/Berlin")},
			time.Date(2000, 10, 28, 22, 30, 0, 0, time.UTC).Sub(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)),
			time.Date(2000, 10, 29, 23, 0, 0, 0, time.UTC)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := mustSet(t, nil, tc.spec)
				time.Sleep(tc.offset)
				spendUSD(s, "a", 1)
				resetsAt(t, s, "a", tc.want)
			})
		})
	}
}

func TestRefusalSaysWhichBudgetSpentLimitAndReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mustSet(t, nil, Spec{Tenant: "acme", Limit: 50, Period: Day})
		spendUSD(s, "acme", 30)
		if e := refusal(t, s, tenantReq("acme")); e != nil {
			t.Fatalf("refused under its budget: %s", e.Message)
		}
		spendUSD(s, "acme", 20.5)
		e := refusal(t, s, tenantReq("acme"))
		if e == nil {
			t.Fatal("admitted past its budget")
		}
		for _, want := range []string{`"tenant:acme:day:usd"`, `tenant "acme"`, "$50.50", "$50.00", "2000-01-02T00:00:00Z", "in 24h0m0s"} {
			if !strings.Contains(e.Message, want) {
				t.Errorf("message %q does not say %s", e.Message, want)
			}
		}
		if refusal(t, s, tenantReq("other")) != nil {
			t.Error("another tenant was refused")
		}
	})
}

func TestKeyBudgetInTokens(t *testing.T) {
	const hash = "0123456789abcdef"
	s := mustSet(t, nil, Spec{Key: hash + strings.Repeat("0", 48), Unit: Tokens, Limit: 1000, Period: Month})
	s.Spent(spend.Entry{Key: spend.Key{Tenant: "t", Inbound: hash}, USD: 99, Tokens: 999})
	inbound := &request.Descriptor{Tenant: "t", Key: "held", Inbound: &request.Inbound{Hash: hash}}
	plain := &request.Descriptor{Tenant: "u", Key: hash}
	if refusal(t, s, inbound) != nil || refusal(t, s, plain) != nil {
		t.Fatal("refused at 999 of 1000 tokens")
	}
	s.Spent(spend.Entry{Key: spend.Key{Tenant: "t", Inbound: hash}, USD: 0, Tokens: 1})
	e := refusal(t, s, inbound)
	if e == nil || refusal(t, s, plain) == nil {
		t.Fatal("admitted at 1000 of 1000 tokens")
	}
	if !strings.Contains(e.Message, "1000 tokens of its 1000 tokens limit") || !strings.Contains(e.Message, "key "+hash) {
		t.Errorf("message %q", e.Message)
	}
	if refusal(t, s, &request.Descriptor{Tenant: "t", Key: "other"}) != nil {
		t.Error("another key was refused")
	}
}

// TestWarnOncePerPeriod: the soft threshold warns (a log line and the
// counter) once a period, and refuses nothing.
func TestWarnOncePerPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		s := mustSet(t, slog.New(slog.NewTextHandler(&buf, nil)), Spec{Name: "team", Tenant: "a", Limit: 10, Warn: 5, Period: Day})
		for range 4 {
			spendUSD(s, "a", 2)
		}
		if refusal(t, s, tenantReq("a")) != nil {
			t.Fatal("refused past its soft threshold")
		}
		if n := strings.Count(buf.String(), "soft threshold"); n != 1 {
			t.Fatalf("%d warnings in the first day, want 1:\n%s", n, buf.String())
		}
		time.Sleep(24 * time.Hour)
		spendUSD(s, "a", 4)
		if n := strings.Count(buf.String(), "soft threshold"); n != 1 {
			t.Fatalf("warned under the threshold of a new day:\n%s", buf.String())
		}
		spendUSD(s, "a", 1)
		if n := strings.Count(buf.String(), "soft threshold"); n != 2 {
			t.Fatalf("%d warnings after the second day's crossing, want 2:\n%s", n, buf.String())
		}
	})
}

// TestOvershootIsWhatCameAfterTheCrossing: answers counted after the
// budget was crossed (requests in flight then) are the overshoot.
func TestOvershootIsWhatCameAfterTheCrossing(t *testing.T) {
	s := mustSet(t, nil, Spec{Tenant: "a", Limit: 10, Period: Day})
	spendUSD(s, "a", 9)
	spendUSD(s, "a", 2) // crosses: 1 over
	spendUSD(s, "a", 3) // in flight at the crossing
	st := s.Statuses()[0]
	if st.Spent != 14 || st.Overshoot != 4 || !st.Exceeded {
		t.Fatalf("status %+v, want spent 14, overshoot 4, exceeded", st)
	}
}

type books map[string]float64

func (b books) Since(from time.Time, tenant, key string) (float64, int64, error) {
	return b[from.Format(time.DateOnly)+"/"+tenant+key], 7, nil
}

// TestLoadStartsThePeriodWithWhatWasSpent: a restart keeps the budget's
// spend of its period (the store's, since the period's start).
func TestLoadStartsThePeriodWithWhatWasSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(50 * time.Hour) // 2000-01-03, a Monday
		s := mustSet(t, nil, Spec{Tenant: "a", Limit: 10, Period: Week}, Spec{Tenant: "b", Limit: 10, Period: Day})
		if err := s.Load(books{"2000-01-03/a": 10, "2000-01-03/b": 4}); err != nil {
			t.Fatal(err)
		}
		if refusal(t, s, tenantReq("a")) == nil {
			t.Error("a's week, spent before the restart, admitted a request")
		}
		if refusal(t, s, tenantReq("b")) != nil {
			t.Error("b refused at 4 of 10")
		}
	})
}

func TestSpecCheck(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{Limit: 1}, "exactly one of tenant, key and group"},
		{Spec{Tenant: "a", Key: "0123456789abcdef", Limit: 1}, "exactly one of tenant, key and group"},
		{Spec{Tenant: "a", Group: "contractors", Limit: 1}, "exactly one of tenant, key and group"},
		{Spec{Key: "sk-ant-secret", Limit: 1}, "short hash"},
		{Spec{Tenant: "a", Limit: -1}, "above 0"},
		{Spec{Tenant: "a", Limit: 1.5, Unit: Tokens}, "whole number"},
		{Spec{Tenant: "a", Limit: 1, Warn: 1}, "below the limit"},
		// Named as a group budget's member would be: /metrics broke on
		// the two budgets of one name.
		{Spec{Name: "g/alice@example.com", Tenant: "bob@example.com", Limit: 1}, "no '/'"},
	} {
		err := tc.spec.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.spec, err, tc.want)
		}
	}
	usd := 1.0
	if _, err := (File{USD: &usd, Period: "day", TimeZone: "Local"}).Spec("x", "a", "", ""); err == nil || !strings.Contains(err.Error(), "name the zone") {
		t.Errorf("time_zone Local: %v, want it refused (replicas on hosts set differently would disagree on the period)", err)
	}
	// A key given where its hash belongs is not repeated: it would be
	// logged.
	if err := (&Spec{Key: "sk-ant-secret", Limit: 1}).Check(); err == nil || strings.Contains(err.Error(), "sk-ant-secret") {
		t.Errorf("error %v: want one that does not show the key", err)
	}
}

// BenchmarkRequestPath is what a budget costs each request: the check
// before it waits and the count of its answer, on a budget it matches.
//
//	go test -run '^$' -bench RequestPath ./budget/
func BenchmarkRequestPath(b *testing.B) {
	sp := Spec{Tenant: "a", Limit: 1e12, Warn: 1e11, Period: Day, Zone: time.UTC}
	if err := sp.Check(); err != nil {
		b.Fatal(err)
	}
	s, _ := New([]Spec{sp}, nil)
	r := tenantReq("a")
	e := spend.Entry{Key: spend.Key{Tenant: "a", Inbound: "k", Model: "m"}, USD: 0.01, Tokens: 100}
	b.ReportAllocs()
	for b.Loop() {
		if s.Refuse(r) != nil {
			b.Fatal("refused")
		}
		s.Spent(e)
	}
}

// Work accepted now and answered later is held at its estimate: a
// reservation that does not fit in what is left is refused and holds
// nothing; what is held counts as spent for every check, across the
// period's end, until it is released (once, however often Release is
// called).
func TestReserveHoldsUntilReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := mustSet(t, nil, Spec{Tenant: "acme", Limit: 10, Period: Day})
		spendUSD(s, "acme", 3)
		first, e := s.Reserve("acme", "", Member{}, Estimate{USD: 6, Tokens: 600})
		if e != nil || first == nil {
			t.Fatalf("$6 of the $7 left refused: %v", e)
		}
		if _, e := s.Reserve("acme", "", Member{}, Estimate{USD: 2}); e == nil || e.Status != 402 || e.Type != "billing_error" ||
			!strings.Contains(e.Message, "estimated cost, $2.00") || !strings.Contains(e.Message, "$1.00 left") || !strings.Contains(e.Message, "$6.00 held") {
			t.Fatalf("$2 with $1 left: %v", e)
		}
		if r, e := s.Reserve("other", "", Member{}, Estimate{USD: 1e6}); r != nil || e != nil {
			t.Errorf("a tenant without a budget: %v %v", r, e)
		}
		spendUSD(s, "acme", 0.5)
		if e := refusal(t, s, tenantReq("acme")); e != nil {
			t.Fatalf("refused at $3.50 spent and $6 held of $10: %s", e.Message)
		}
		spendUSD(s, "acme", 0.5)
		if e := refusal(t, s, tenantReq("acme")); e == nil || !strings.Contains(e.Message, "$6.00 more is held") {
			t.Fatalf("admitted at $4 spent and $6 held of $10: %v", e)
		}
		time.Sleep(24 * time.Hour) // the next day: the spend resets, the hold stays
		if st := s.Statuses()[0]; st.Spent != 0 || st.Held != 6 {
			t.Errorf("the next day: spent %v, held %v; want 0 and 6", st.Spent, st.Held)
		}
		if _, e := s.Reserve("acme", "", Member{}, Estimate{USD: 5}); e == nil {
			t.Error("$5 reserved with $6 of $10 held")
		}
		first.Release()
		first.Release()
		if st := s.Statuses()[0]; st.Held != 0 {
			t.Errorf("released: held %v", st.Held)
		}
		if r, e := s.Reserve("acme", "", Member{}, Estimate{USD: 10}); r == nil || e != nil {
			t.Errorf("the whole budget, nothing held or spent: %v", e)
		}
	})
}
