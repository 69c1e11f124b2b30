package spendstore

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/internal/sqlq"
)

// Since sums what tenant (or, when tenant is "", key) spent from from on:
// the books and what is not written yet. from is on a bucket's edge (a
// budget's period start: every zone's midnight is).
func (s *Store) Since(from time.Time, tenant, key string) (usd float64, tokens int64, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	usd, tokens, err = s.sum(from, tenant, key, false)
	if err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	s.eachHeld(func(k row, a *amount) {
		if k.bucket >= from.Unix() && (tenant != "" && k.tenant == tenant || tenant == "" && k.key == key) {
			usd, tokens = usd+a.usd, tokens+a.tokens
		}
	})
	s.mu.Unlock()
	return usd, tokens, nil
}

// Others sums what tenant (or, when tenant is "", key) spent from from on
// by the other replicas sharing the books, as far as they have written it
// (each writes once a FlushEvery); 0 when the books are not shared. It
// does not wait for this replica's writer. While it fails the store says
// Failing.
func (s *Store) Others(from time.Time, tenant, key string) (usd float64, tokens int64, err error) {
	if !s.pg {
		return 0, 0, nil
	}
	usd, tokens, err = s.sum(from, tenant, key, true)
	if err != nil {
		if !s.readFailing.Swap(true) {
			s.log.Error("spend store: reading the other replicas' spend failed; budgets hold from this replica's count and the last read until it succeeds", "store", s.where, "err", s.errText(err))
		}
		return 0, 0, err
	}
	if s.readFailing.Swap(false) {
		s.log.Info("spend store: reading the other replicas' spend again", "store", s.where)
	}
	return usd, tokens, nil
}

// sum is the books' sum for tenant or key from from on; only the other
// replicas' rows with others.
func (s *Store) sum(from time.Time, tenant, key string, others bool) (usd float64, tokens int64, err error) {
	col, who := "tenant", tenant
	if tenant == "" {
		col, who = "key", key
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q := `SELECT COALESCE(SUM(usd), 0), CAST(COALESCE(SUM(tokens), 0) AS BIGINT) FROM spend WHERE ` + col + ` = ? AND bucket >= ?`
	args := []any{who, from.Unix()}
	if others {
		q += ` AND replica <> ?`
		args = append(args, s.replica)
	}
	if err = s.db.QueryRowContext(ctx, s.q(q), args...).Scan(&usd, &tokens); err != nil {
		return 0, 0, fmt.Errorf("spend store %s: %w", s.where, err)
	}
	return usd, tokens, nil
}

// eachHeld calls f with every row heard and not yet written: the pending and
// a write that failed. Under s.mu.
func (s *Store) eachHeld(f func(row, *amount)) {
	for k, a := range s.pending {
		f(k, a)
	}
	if s.unsent != nil {
		for k, a := range s.unsent.rows {
			f(k, a)
		}
	}
}

// q rewrites ? placeholders as $1, $2... for PostgreSQL.
func (s *Store) q(query string) string {
	if !s.pg {
		return query
	}
	return sqlq.Dollar(query)
}
