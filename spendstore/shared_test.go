package spendstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
)

func openPG(t *testing.T, dsn string, now time.Time) *Store {
	t.Helper()
	s, err := OpenPostgres(context.Background(), dsn, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now }
	t.Cleanup(func() { s.Close() })
	return s
}

// Two replicas on one PostgreSQL keep one set of books: each writes its
// own rows, Others is what the rest wrote, Since and Query the whole.
func TestSharedBooks(t *testing.T) {
	dsn := pgtest.Start(t)
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	a, b := openPG(t, dsn, day.Add(9*time.Hour)), openPG(t, dsn, day.Add(9*time.Hour))
	if a.Replica() == b.Replica() || !a.Shared() {
		t.Fatalf("replicas %q and %q, shared %v", a.Replica(), b.Replica(), a.Shared())
	}
	a.Spent(entry("acme", "k1", "m", 1.25, 100))
	b.Spent(entry("acme", "k2", "m", 0.5, 10))
	b.Spent(entry("acme", "k1", "m", 2, 20))
	if got, _, _ := a.Others(day, "acme", ""); got != 0 {
		t.Errorf("before any write, a reads $%v of others", got)
	}
	for _, s := range []*Store{a, b} {
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	a.Spent(entry("acme", "k1", "m", 4, 1)) // a's, not written: its own, never in Others
	for _, c := range []struct {
		s           *Store
		tenant, key string
		usd         float64
		tokens      int64
	}{{a, "acme", "", 2.5, 30}, {b, "acme", "", 1.25, 100}, {a, "", "k1", 2, 20}, {b, "", "k1", 1.25, 100}, {a, "beta", "", 0, 0}} {
		usd, tokens, err := c.s.Others(day, c.tenant, c.key)
		if err != nil || usd != c.usd || tokens != c.tokens {
			t.Errorf("Others(%q, %q) = $%v %d %v; want $%v %d", c.tenant, c.key, usd, tokens, err, c.usd, c.tokens)
		}
	}
	if usd, tokens, err := a.Since(day, "acme", ""); err != nil || usd != 7.75 || tokens != 131 {
		t.Errorf("Since = $%v %d %v; want $7.75 131 (both replicas' and a's held)", usd, tokens, err)
	}
	lines, err := b.Query(context.Background(), Filter{Period: "day"})
	if err != nil {
		t.Fatal(err)
	}
	var usd float64
	var answers int64
	for _, l := range lines {
		usd, answers = usd+l.USD, answers+l.Answers
		if l.Key == "k1" && (l.USD != 3.25 || l.Answers != 2) {
			t.Errorf("k1's line: %+v; want both replicas' $3.25 in 2 answers", l)
		}
	}
	if len(lines) != 2 || usd != 3.75 || answers != 3 {
		t.Errorf("b's query: %d lines, $%v, %d answers; want 2 lines, $3.75 in 3 (a's last not written)", len(lines), usd, answers)
	}
}

// A write whose commit went through but whose answer was lost is tried
// again as it was, and found by its number: the books count it once.
func TestRetriedWriteCountedOnce(t *testing.T) {
	dsn := pgtest.Start(t)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s, other := openPG(t, dsn, now), openPG(t, dsn, now)
	s.Spent(entry("acme", "k", "m", 1, 10))
	s.wmu.Lock()
	b := &batch{seq: 1, rows: s.pending}
	s.pending, s.seq = map[row]*amount{}, 1
	err := s.write(b) // committed; say its answer never came
	s.unsent = b
	s.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	s.Spent(entry("acme", "k", "m", 2, 20))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if usd, tokens, err := other.Others(now.Truncate(24*time.Hour), "acme", ""); err != nil || usd != 3 || tokens != 30 {
		t.Errorf("the books hold $%v %d tokens %v; want $3, 30 tokens: the retried write once", usd, tokens, err)
	}
}

// A write that fails on PostgreSQL keeps its spend in memory (the store
// says so, and Since counts it), and writes it once the table is back.
func TestSharedFailedWriteIsHeld(t *testing.T) {
	dsn := pgtest.Start(t)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s, other := openPG(t, dsn, now), openPG(t, dsn, now)
	if _, err := s.db.Exec(`ALTER TABLE spend RENAME TO away`); err != nil {
		t.Fatal(err)
	}
	s.Spent(entry("acme", "k", "m", 1, 1))
	if err := s.Flush(); err == nil || !s.Failing() {
		t.Fatalf("a write to a missing table: %v, failing %v", err, s.Failing())
	}
	if _, _, err := other.Others(now.Truncate(24*time.Hour), "acme", ""); err == nil || !other.Failing() {
		t.Fatalf("a read of a missing table: %v, failing %v", err, other.Failing())
	}
	s.Spent(entry("acme", "k", "m", 2, 1))
	if usd, _, err := s.Since(now.Truncate(24*time.Hour), "acme", ""); err == nil {
		t.Errorf("Since read a missing table: $%v", usd)
	}
	if _, err := s.db.Exec(`ALTER TABLE away RENAME TO spend`); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil || s.Failing() {
		t.Fatalf("the store back: %v, failing %v", err, s.Failing())
	}
	usd, tokens, err := other.Others(now.Truncate(24*time.Hour), "acme", "")
	if err != nil || usd != 3 || tokens != 2 || other.Failing() {
		t.Errorf("after the outage: $%v %d tokens %v (failing %v); want $3, 2 tokens", usd, tokens, err, other.Failing())
	}
}

// The DSN is a secret: a store that cannot be opened says why without it
// or its password.
func TestDSNNotInErrors(t *testing.T) {
	dsn := "postgres://sluice:hunter2secret@127.0.0.1:1/books?sslmode=disable&connect_timeout=2"
	_, err := OpenPostgres(context.Background(), dsn, nil)
	if err == nil {
		t.Fatal("opened a PostgreSQL on port 1")
	}
	if strings.Contains(err.Error(), "hunter2secret") || strings.Contains(err.Error(), dsn) {
		t.Errorf("the error quotes the DSN: %v", err)
	}
}
