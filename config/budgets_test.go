package config

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/budget"
)

// A config file's [[budgets]] are read beside the settings, each checked
// and named.
func TestBudgetsSection(t *testing.T) {
	c, err := Load(withFile(t, `
BATCH_MAX_SIZE = 2

[[budgets]]
tenant = "acme"
usd = 50
warn_at = 40
period = "day"
time_zone = "Europe/Berlin"

[[budgets]]
name = "agent-7"
key = "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"
tokens = 2000000
period = "month"
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Budgets) != 2 || c.MaxSize != 2 {
		t.Fatalf("budgets %+v, size %d", c.Budgets, c.MaxSize)
	}
	a, k := c.Budgets[0], c.Budgets[1]
	if a.Name != "tenant:acme:day:usd" || a.Unit != budget.USD || a.Limit != 50 || a.Warn != 40 || a.Zone.String() != "Europe/Berlin" {
		t.Errorf("acme's budget %+v", a)
	}
	if k.Name != "agent-7" || k.Key != "0123456789abcdef" || k.Unit != budget.Tokens || k.Limit != 2e6 || k.Period != budget.Month || k.Zone.String() != "UTC" {
		t.Errorf("agent-7's budget %+v", k)
	}
	plain, err := Load(withFile(t, "BATCH_MAX_SIZE = 2\n"), env(nil))
	if err != nil || plain.Budgets != nil {
		t.Errorf("no [[budgets]]: %v, %v; want none", plain.Budgets, err)
	}
}

// A [[budgets]] table with group is a budget each member of the identity
// provider's group gets on their own; group is one of tenant, key and
// group, and named when the table is wrong.
func TestGroupBudgetsSection(t *testing.T) {
	c, err := Load(withFile(t, `
[[budgets]]
name = "contractors-day"
group = "contractors"
usd = 5
period = "day"

[[budgets]]
group = "interns"
tokens = 100000
period = "week"
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Budgets) != 2 {
		t.Fatalf("budgets %+v", c.Budgets)
	}
	g, i := c.Budgets[0], c.Budgets[1]
	if g.Name != "contractors-day" || g.Group != "contractors" || g.Tenant != "" || g.Key != "" || g.Unit != budget.USD || g.Limit != 5 || g.Period != budget.Day {
		t.Errorf("contractors' budget %+v", g)
	}
	if i.Name != "group:interns:week:tokens" || i.Group != "interns" || i.Limit != 1e5 {
		t.Errorf("interns' budget %+v", i)
	}
	for name, c := range map[string]struct{ body, want string }{
		"group and tenant": {"[[budgets]]\ngroup = \"g\"\ntenant = \"a\"\nusd = 5\nperiod = \"day\"\n", `budgets[1] (the 1st one in the file, tenant "a"): give exactly one of tenant, key and group`},
		"group and key":    {"[[budgets]]\ngroup = \"g\"\nkey = \"0123456789abcdef\"\nusd = 5\nperiod = \"day\"\n", `budgets[1] (the 1st one in the file, group "g"): give exactly one of tenant, key and group`},
		"no amount":        {"[[budgets]]\ngroup = \"g\"\nperiod = \"day\"\n", `budgets[1] (the 1st one in the file, group "g"): give exactly one of usd and tokens`},
		"group a list":     {"[[budgets]]\ngroup = [\"g\"]\nusd = 5\nperiod = \"day\"\n", "[[budgets]]"},
	} {
		_, err := Load(withFile(t, c.body), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", name, err, c.want)
		}
	}
}

// [[budgets]] are decoded strictly: an unknown key, a negative amount, an
// unknown period or time zone, budgets as a single value, is refused at
// start, naming the budget and what is wrong.
func TestBudgetsSectionRefused(t *testing.T) {
	for name, c := range map[string]struct{ body, want string }{
		"unknown key":    {"[[budgets]]\ntenant = \"a\"\nusdd = 5\nperiod = \"day\"\n", "unknown key budgets.usdd"},
		"negative":       {"[[budgets]]\ntenant = \"a\"\nusd = -5\nperiod = \"day\"\n", `budgets[1] (the 1st one in the file, tenant "a"): the limit (usd or tokens) must be above 0`},
		"both units":     {"[[budgets]]\ntenant = \"a\"\nusd = 5\ntokens = 5\nperiod = \"day\"\n", "exactly one of usd and tokens"},
		"unknown period": {"[[budgets]]\ntenant = \"a\"\nusd = 5\nperiod = \"fortnight\"\n", `period "fortnight": want day, week or month`},
		"no period":      {"[[budgets]]\ntenant = \"a\"\nusd = 5\n", "no period"},
		"unknown zone":   {"[[budgets]]\ntenant = \"a\"\nusd = 5\nperiod = \"day\"\ntime_zone = \"Mars/Olympus\"\n", `time_zone "Mars/Olympus"`},
		"second":         {"[[budgets]]\ntenant = \"a\"\nusd = 5\nperiod = \"day\"\n[[budgets]]\nname = \"x\"\nusd = 5\nperiod = \"day\"\n", `budgets[2] (the 2nd one in the file, named "x"): give exactly one of tenant, key and group`},
		"single value":   {"budgets = 3\n", "budgets is an array of tables"},
		"a key in clear": {"[[budgets]]\nkey = \"sk-ant-api03-secret\"\nusd = 5\nperiod = \"day\"\n", "never the key itself"},
	} {
		_, err := Load(withFile(t, c.body), env(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error with %q", name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "sk-ant-api03-secret") {
			t.Errorf("%s: the error shows the key: %v", name, err)
		}
	}
}

// ADMIN_KEY is a secret: a value refused is not repeated in the error.
func TestAdminKeyNotShown(t *testing.T) {
	_, err := Load(withFile(t, "ADMIN_KEY = \"tooshort\"\n"), env(nil))
	if err == nil || strings.Contains(err.Error(), "tooshort") || !strings.Contains(err.Error(), "ADMIN_KEY") {
		t.Errorf("a short ADMIN_KEY: %v; want an error naming the setting, not its value", err)
	}
}
