// Package budget caps what a tenant or an inbound key, or each member of an
// identity provider's group, may spend in a day, a week or a month, in USD
// or in tokens: a Set hears every answer's
// spend from the spend ledger (it is a spend.Sink), and refuses a request
// of a tenant or key past a hard budget before it waits. A soft threshold
// only warns. A request in flight is never cut, so a budget can be
// overshot by what was in flight when it was crossed; the Set reports by
// how much.
package budget

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	_ "time/tzdata" // a named time zone resolves on a host without zoneinfo
)

// Unit is what a budget counts.
type Unit int

const (
	USD Unit = iota
	Tokens
)

func (u Unit) String() string {
	if u == Tokens {
		return "tokens"
	}
	return "usd"
}

// Period is how long a budget's spend is counted before it starts again.
type Period int

const (
	Day Period = iota
	Week
	Month
)

func (p Period) String() string {
	switch p {
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return "day"
}

// ParsePeriod reads "day", "week" or "month".
func ParsePeriod(s string) (Period, error) {
	switch s {
	case "day":
		return Day, nil
	case "week":
		return Week, nil
	case "month":
		return Month, nil
	}
	return 0, fmt.Errorf("period %q: want day, week or month", s)
}

// Spec is one budget as configured.
type Spec struct {
	// Name names the budget in errors, logs, metrics and the admin API;
	// empty: derived from what it binds (tenant:acme:day).
	Name string
	// Tenant, Key or Group: exactly one is set. Key is an inbound key by
	// its short hash, as the spend metrics' key label names it (the first
	// 16 hex digits of the sluice key's SHA-256; without inbound keys, of
	// the API key the client sent). Group is an identity provider's group:
	// the budget binds each member of it on their own, as a budget of
	// their tenant (a member's tracked budget has Tenant and Group set).
	Tenant, Key, Group string
	Unit               Unit
	// Limit is the hard budget; Warn, when above 0, the soft threshold
	// that only warns. Both in Unit.
	Limit, Warn float64
	Period      Period
	// Zone is where the period's days start; nil: UTC.
	Zone *time.Location
}

var shortHash = regexp.MustCompile(`^[0-9a-f]{16}([0-9a-f]{48})?$`)

// Check says what is wrong with s, if anything, and fills in its name and
// zone and shortens a full SHA-256 key to its short hash.
func (s *Spec) Check() error {
	s.Key = strings.ToLower(s.Key) // hex either way; the labels are lower-case
	switch {
	case count(s.Tenant != "", s.Key != "", s.Group != "") != 1:
		return errors.New("give exactly one of tenant, key and group")
	case strings.Contains(s.Name, "/"):
		// A group budget's members are named NAME/member: a name with a
		// slash could be one of them, and two budgets of one name break
		// the metrics.
		return fmt.Errorf("name %q: no '/' in a budget's name (a group budget's members are named NAME/member)", s.Name)
	case s.Key != "" && !shortHash.MatchString(s.Key):
		// Not echoed: a key given where its hash belongs must not reach a log.
		return errors.New("key: want the key's short hash, 16 lower-case hex digits as the spend metrics' key label shows (or the 64 of its SHA-256, as the keys file lists it), never the key itself (the value given is not shown)")
	case !(s.Limit > 0):
		return errors.New("the limit (usd or tokens) must be above 0")
	case s.Unit == Tokens && s.Limit != float64(int64(s.Limit)):
		return errors.New("tokens must be a whole number")
	case s.Warn < 0 || s.Warn >= s.Limit:
		return fmt.Errorf("warn_at %v must be above 0 and below the limit %v", s.Warn, s.Limit)
	}
	if len(s.Key) > 16 {
		s.Key = s.Key[:16]
	}
	if s.Zone == nil {
		s.Zone = time.UTC
	}
	if s.Name == "" {
		who := "tenant:" + s.Tenant
		switch {
		case s.Key != "":
			who = "key:" + s.Key
		case s.Group != "":
			who = "group:" + s.Group
		}
		s.Name = who + ":" + s.Period.String() + ":" + s.Unit.String()
	}
	return nil
}

// count is how many of bs are true.
func count(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// Start is the start of the period t is in, in the budget's zone.
func (s *Spec) Start(t time.Time) time.Time {
	t = t.In(s.Zone)
	y, m, d := t.Date()
	switch s.Period {
	case Week: // ISO weeks: from Monday
		d -= (int(t.Weekday()) + 6) % 7
	case Month:
		d = 1
	}
	return time.Date(y, m, d, 0, 0, 0, 0, s.Zone)
}

// Reset is when the period that starts at start ends: the next day's,
// week's or month's midnight in the zone (time.Date's normalisation
// keeps it midnight across a change of daylight saving time, so a day
// is 23 or 25 hours long then).
func (s *Spec) Reset(start time.Time) time.Time {
	y, m, d := start.Date()
	switch s.Period {
	case Week:
		d += 7
	case Month:
		m++
	default:
		d++
	}
	return time.Date(y, m, d, 0, 0, 0, 0, s.Zone)
}

// File is a budget's amount and period as a file spells them: the config
// file's [[budgets]] tables and the keys file's "budget" members share
// it, and so its checks and its errors.
type File struct {
	USD      *float64 `toml:"usd" json:"usd"`
	Tokens   *int64   `toml:"tokens" json:"tokens"`
	Period   string   `toml:"period" json:"period"`
	TimeZone string   `toml:"time_zone" json:"time_zone"`
	WarnAt   float64  `toml:"warn_at" json:"warn_at"`
}

// Spec is the budget f describes, named name (empty: derived) and binding
// tenant, key or each member of group, checked.
func (f File) Spec(name, tenant, key, group string) (Spec, error) {
	sp := Spec{Name: name, Tenant: tenant, Key: key, Group: group, Warn: f.WarnAt}
	switch {
	case (f.USD == nil) == (f.Tokens == nil):
		return sp, errors.New("give exactly one of usd and tokens")
	case f.USD != nil:
		sp.Unit, sp.Limit = USD, *f.USD
	default:
		sp.Unit, sp.Limit = Tokens, float64(*f.Tokens)
	}
	if f.Period == "" {
		return sp, errors.New("no period: give day, week or month")
	}
	var err error
	if sp.Period, err = ParsePeriod(f.Period); err != nil {
		return sp, err
	}
	if f.TimeZone == "Local" {
		// The host's zone: replicas on hosts set differently would start
		// the period at different times.
		return sp, errors.New(`time_zone "Local": name the zone (an IANA name such as Europe/Berlin, or UTC), so that every replica starts the period at the same time`)
	}
	if f.TimeZone != "" {
		if sp.Zone, err = time.LoadLocation(f.TimeZone); err != nil {
			return sp, fmt.Errorf("time_zone %q: not a time zone this host knows (want an IANA name such as Europe/Berlin, or UTC)", f.TimeZone)
		}
	}
	return sp, sp.Check()
}

// Same says s and o are the same budget: its name, what it binds, its
// unit, amounts, period and zone.
func (s Spec) Same(o Spec) bool {
	return s.Name == o.Name && s.Tenant == o.Tenant && s.Key == o.Key && s.Group == o.Group && s.Unit == o.Unit && s.Limit == o.Limit && s.Warn == o.Warn &&
		s.Period == o.Period && s.Zone.String() == o.Zone.String()
}
