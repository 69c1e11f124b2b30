package budget

import (
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Status is one budget's state now: the admin API's row.
type Status struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
	Key    string `json:"key,omitempty"`
	// Group is a group budget's group: its row says what its members
	// spent together (each is bound by Limit on their own), and each
	// member seen so far has a row of their own, named budget/tenant,
	// with Tenant and Group.
	Group string `json:"group,omitempty"`
	// Members is, on a group budget's row, how many members this replica
	// has seen this run.
	Members *int    `json:"members,omitempty"`
	Unit    string  `json:"unit"`
	Period  string  `json:"period"`
	Zone    string  `json:"time_zone"`
	Limit   float64 `json:"limit"`
	Warn    float64 `json:"warn_at,omitempty"`
	Spent   float64 `json:"spent"`
	// Overshoot is what was spent past the limit this period: answers of
	// requests that were in flight when it was crossed.
	Overshoot float64 `json:"overshoot"`
	// Held is the estimated spend of accepted work still to be answered
	// (bulk requests, Message Batches; see Reserve): counted against the
	// limit with Spent.
	Held     float64   `json:"held"`
	Exceeded bool      `json:"exceeded"`
	Start    time.Time `json:"period_start"`
	Reset    time.Time `json:"resets_at"`
}

// Statuses is every budget's state, in the order configured.
func (s *Set) Statuses() []Status {
	if s == nil {
		return nil
	}
	now := time.Now()
	all := s.idx.Load().all
	out := make([]Status, 0, len(all))
	for _, t := range all {
		if t.members == nil {
			out = append(out, t.status(now))
			continue
		}
		// The group budget, then its members by name.
		ms := t.members.list()
		slices.SortFunc(ms, func(a, b *tracked) int { return strings.Compare(a.Name, b.Name) })
		n := len(ms)
		g := Status{Name: t.Name, Group: t.Group, Members: &n, Unit: t.Unit.String(), Period: t.Period.String(), Zone: t.Zone.String()}
		g.Limit, g.Warn = t.limits()
		g.Start = t.Start(now)
		g.Reset = t.Reset(g.Start)
		rows := make([]Status, 0, len(ms))
		for _, m := range ms {
			st := m.status(now)
			g.Spent += st.Spent
			g.Overshoot += st.Overshoot
			g.Held += st.Held
			rows = append(rows, st)
		}
		out = append(append(out, g), rows...)
	}
	return out
}

// status is t's row. Not for a group budget.
func (t *tracked) status(now time.Time) Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.roll(now)
	return Status{Name: t.Name, Tenant: t.Tenant, Key: t.Key, Group: t.Group, Unit: t.Unit.String(), Period: t.Period.String(), Zone: t.Zone.String(),
		Limit: t.Limit, Warn: t.Warn, Spent: t.spent, Overshoot: t.overshoot, Held: t.held, Exceeded: t.spent+t.held >= t.Limit, Start: t.start, Reset: t.reset}
}

// Books is what a durable store knows of spend before now: Since sums
// what tenant (or, if tenant is "", key) spent from from on.
type Books interface {
	Since(from time.Time, tenant, key string) (usd float64, tokens int64, err error)
}

// Load starts each budget's current period with what b says was spent in
// it before sluice started, so that a budget holds across a restart.
func (s *Set) Load(b Books) error {
	if s == nil {
		return nil
	}
	s.remember(b)
	now := time.Now()
	var first error
	s.idx.Load().each(func(t *tracked) {
		if err := s.begin(t, b, now); err != nil && first == nil {
			first = err
		}
	})
	return first
}

// metrics: the counters, and gauges read from the budgets at each scrape.
var (
	spentDesc = prometheus.NewDesc("sluice_budget_spent", "What each budget's tenant or key spent this period, in the budget's unit (usd or tokens).",
		[]string{"budget", "unit"}, nil)
	limitDesc = prometheus.NewDesc("sluice_budget_limit", "Each budget's hard limit, in its unit.", []string{"budget", "unit"}, nil)
	overDesc  = prometheus.NewDesc("sluice_budget_overshoot", "What each budget's tenant or key spent past its limit this period, in its unit: the answers of requests in flight when it was crossed (none is cut).",
		[]string{"budget", "unit"}, nil)
	resetDesc = prometheus.NewDesc("sluice_budget_reset_timestamp_seconds", "When each budget's period ends and its spend starts again from 0.", []string{"budget"}, nil)
)

// Describe and Collect make the Set a prometheus.Collector.
func (s *Set) Describe(ch chan<- *prometheus.Desc) {
	ch <- spentDesc
	ch <- limitDesc
	ch <- overDesc
	ch <- resetDesc
	s.refused.Describe(ch)
	s.warnings.Describe(ch)
}

func (s *Set) Collect(ch chan<- prometheus.Metric) {
	for _, st := range s.Statuses() {
		if st.Members != nil { // a group budget: its members' rows are the series
			continue
		}
		ch <- prometheus.MustNewConstMetric(spentDesc, prometheus.GaugeValue, st.Spent, st.Name, st.Unit)
		ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, st.Limit, st.Name, st.Unit)
		ch <- prometheus.MustNewConstMetric(overDesc, prometheus.GaugeValue, st.Overshoot, st.Name, st.Unit)
		ch <- prometheus.MustNewConstMetric(resetDesc, prometheus.GaugeValue, float64(st.Reset.Unix()), st.Name)
	}
	s.refused.Collect(ch)
	s.warnings.Collect(ch)
}
