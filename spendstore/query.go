package spendstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// Filter, Line and Periods are package spend's, where the admin API
// (package proxy) names them without linking a store driver.
type (
	Filter = spend.Filter
	Line   = spend.Line
)

// Periods are the groupings Query takes.
var Periods = spend.Periods

// Query is the books' lines f selects, the earliest period first and,
// within one, the most spent first. What was heard and not yet written is
// written first, so that the answer is up to the moment. Shared books
// (PostgreSQL) hold every replica's lines, as far as each has written
// them (once a FlushEvery); the lines of one tenant, key, model and
// period are summed across replicas.
func (s *Store) Query(ctx context.Context, f Filter) ([]Line, error) {
	if !slices.Contains(Periods, f.Period) {
		return nil, fmt.Errorf("period %q: want one of %s", f.Period, strings.Join(Periods, ", "))
	}
	_ = s.Flush() // a failing store is read as it is; its held spend is counted below
	s.wmu.Lock()
	defer s.wmu.Unlock()
	q := `SELECT bucket - bucket % 86400, tenant, key, model, SUM(usd), SUM(estimated_usd), CAST(SUM(tokens) AS BIGINT), CAST(SUM(answers) AS BIGINT) FROM spend WHERE 1 = 1`
	var args []any
	for _, c := range []struct{ col, v string }{{"tenant", f.Tenant}, {"key", f.Key}, {"model", f.Model}} {
		if c.v != "" {
			q += " AND " + c.col + " = ?"
			args = append(args, c.v)
		}
	}
	if !f.From.IsZero() {
		q += " AND bucket >= ?"
		args = append(args, f.From.Unix())
	}
	if !f.To.IsZero() {
		q += " AND bucket < ?"
		args = append(args, f.To.Unix())
	}
	q += " GROUP BY 1, 2, 3, 4"
	rows, err := s.db.QueryContext(ctx, s.q(q), args...)
	if err != nil {
		return nil, fmt.Errorf("spend store %s: %w", s.where, err)
	}
	defer rows.Close()
	type group struct {
		start              int64
		tenant, key, model string
	}
	sums := map[group]*Line{}
	add := func(day int64, tenant, key, model string, a amount) {
		start, name := periodOf(time.Unix(day, 0).UTC(), f.Period)
		g := group{start.Unix(), tenant, key, model}
		l := sums[g]
		if l == nil {
			l = &Line{Period: name, Start: start, Tenant: tenant, Key: key, Model: model}
			sums[g] = l
		}
		l.USD, l.EstimatedUSD, l.Tokens, l.Answers = l.USD+a.usd, l.EstimatedUSD+a.estimated, l.Tokens+a.tokens, l.Answers+a.answers
	}
	for rows.Next() {
		var day int64
		var tenant, key, model string
		var a amount
		if err := rows.Scan(&day, &tenant, &key, &model, &a.usd, &a.estimated, &a.tokens, &a.answers); err != nil {
			return nil, fmt.Errorf("spend store %s: %w", s.where, err)
		}
		add(day, tenant, key, model, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("spend store %s: %w", s.where, err)
	}
	s.mu.Lock() // held in memory while the store fails
	s.eachHeld(func(k row, a *amount) {
		if (f.Tenant == "" || k.tenant == f.Tenant) && (f.Key == "" || k.key == f.Key) && (f.Model == "" || k.model == f.Model) &&
			(f.From.IsZero() || k.bucket >= f.From.Unix()) && (f.To.IsZero() || k.bucket < f.To.Unix()) {
			add(k.bucket-k.bucket%86400, k.tenant, k.key, k.model, *a)
		}
	})
	s.mu.Unlock()
	out := make([]Line, 0, len(sums))
	for _, l := range sums {
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b Line) int {
		return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(b.USD, a.USD), cmp.Compare(b.Tokens, a.Tokens),
			cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Model, b.Model))
	})
	return out, nil
}

// periodOf is the start and name of the period of kind that the UTC day
// starting at day is in.
func periodOf(day time.Time, kind string) (time.Time, string) {
	switch kind {
	case "week":
		start := day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		y, w := start.ISOWeek()
		return start, fmt.Sprintf("%d-W%02d", y, w)
	case "month":
		start := time.Date(day.Year(), day.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.Format("2006-01")
	case "all":
		return time.Time{}, "all"
	}
	return day, day.Format(time.DateOnly)
}
