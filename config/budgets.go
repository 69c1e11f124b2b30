package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/sluicehq/sluice/budget"
)

// budgetsKey is the config file's array of budgets, one table each:
//
//	[[budgets]]
//	tenant = "acme"          # or key = "<the key's short hash>", or group = "contractors" (each member on their own)
//	usd = 50                 # or tokens = 2000000
//	period = "day"           # day, week or month
//	time_zone = "Europe/Berlin"  # optional; UTC if not given
//	warn_at = 40             # optional soft threshold, in the same unit
//	name = "acme-daily"      # optional
//
// Like [prices], it is no setting: only the file can spell it.
const budgetsKey = "budgets"

// budgetKeys are the keys one budget's table takes.
var budgetKeys = []string{"name", "tenant", "key", "group", "usd", "tokens", "period", "time_zone", "warn_at"}

// fileBudget is one [[budgets]] table as the file gives it.
type fileBudget struct {
	Name        string `toml:"name"`
	Tenant      string `toml:"tenant"`
	Key         string `toml:"key"`
	Group       string `toml:"group"` // an identity provider's group: each member bound on their own
	budget.File        // usd or tokens, period, time_zone, warn_at
}

// decodeBudgets reads the [[budgets]] of the config file name, whose text
// is data, strictly: an unknown key, a missing or negative amount, an
// unknown period or time zone stops sluice, the budget named by its place
// in the file (budgets[2]) and what it binds.
func decodeBudgets(name string, data []byte) ([]budget.Spec, error) {
	var f struct {
		Budgets []fileBudget `toml:"budgets"`
	}
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("config file %s: [[%s]]: %v; want an array of tables, each with tenant, key or group, usd or tokens, and period", name, budgetsKey, err)
	}
	var bad []string
	for _, k := range md.Undecoded() {
		if len(k) > 0 && k[0] == budgetsKey {
			bad = append(bad, fmt.Sprintf("unknown key %s (a budget takes %s)", k, strings.Join(budgetKeys, ", ")))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, fmt.Errorf("config file %s: %s", name, strings.Join(bad, "; "))
	}
	specs := make([]budget.Spec, 0, len(f.Budgets))
	for i, b := range f.Budgets {
		sp, err := b.spec()
		if err != nil {
			return nil, fmt.Errorf("config file %s: budgets[%d] (the %s one in the file%s): %w", name, i+1, ordinal(i+1), b.which(), err)
		}
		specs = append(specs, sp)
	}
	return specs, nil
}

func (b fileBudget) spec() (budget.Spec, error) { return b.File.Spec(b.Name, b.Tenant, b.Key, b.Group) }

// which names what the budget binds, for an error.
func (b fileBudget) which() string {
	switch {
	case b.Name != "":
		return fmt.Sprintf(", named %q", b.Name)
	case b.Tenant != "":
		return fmt.Sprintf(", tenant %q", b.Tenant)
	case b.Group != "":
		return fmt.Sprintf(", group %q", b.Group)
	}
	return ""
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprint(n) + suffix
}

// errBudgetsNotArray is the error for a budgets key that is not an array
// of tables.
var errBudgetsNotArray = errors.New(`budgets is an array of tables, one per budget: [[budgets]] with tenant, key or group, usd or tokens, and period`)
