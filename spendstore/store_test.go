package spendstore

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/spend"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, durable bool, dir string, now time.Time) *Store {
	t.Helper()
	s, err := Open(durable, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return now }
	return s
}

func entry(tenant, key, model string, usd float64, tokens int64) spend.Entry {
	return spend.Entry{Key: spend.Key{Tenant: tenant, Inbound: key, Model: model}, USD: usd, Tokens: tokens}
}

// The books survive a restart: what was heard before Close is there when
// the store is opened again, by quarter hour, so that a budget's period
// in any zone sums from its start.
func TestBooksSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := open(t, true, dir, day.Add(10*time.Hour+20*time.Minute))
	s.Spent(entry("acme", "k1", "m", 1.25, 100))
	s.Spent(entry("acme", "k2", "m", 0.75, 50))
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return day.Add(10*time.Hour + 40*time.Minute) }
	s.Spent(entry("acme", "k1", "m", 2, 10)) // not flushed: Close writes it
	s.Spent(entry("beta", "k3", "m", 5, 10))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, true, dir, day.Add(11*time.Hour))
	defer s.Close()
	for _, c := range []struct {
		from        time.Time
		tenant, key string
		usd         float64
		tokens      int64
	}{
		{day, "acme", "", 4, 160},
		{day.Add(10*time.Hour + 30*time.Minute), "acme", "", 2, 10}, // Kolkata's midnight is on a :30
		{day, "", "k1", 3.25, 110},
		{day.Add(24 * time.Hour), "acme", "", 0, 0},
	} {
		usd, tokens, err := s.Since(c.from, c.tenant, c.key)
		if err != nil || math.Abs(usd-c.usd) > 1e-9 || tokens != c.tokens {
			t.Errorf("since %s tenant %q key %q: $%v %d tokens (%v); want $%v %d", c.from, c.tenant, c.key, usd, tokens, err, c.usd, c.tokens)
		}
	}
	lines, err := s.Query(context.Background(), Filter{Period: "day", Tenant: "acme"})
	if err != nil || len(lines) != 2 || lines[0].Key != "k1" || lines[0].USD != 3.25 || lines[0].Answers != 2 || lines[0].Period != "2026-12-01" {
		t.Errorf("acme by day: %+v %v", lines, err)
	}
	lines, _ = s.Query(context.Background(), Filter{Period: "week"})
	if len(lines) != 3 || lines[0].Period != "2026-W49" || lines[0].USD != 5 {
		t.Errorf("by week: %+v", lines)
	}
}

// A store that fails to write keeps the spend in memory, answers from it,
// and writes it when the store takes it again: nothing is lost, nothing
// blocks.
func TestFailedWriteIsHeldAndWrittenLater(t *testing.T) {
	s := open(t, false, "", time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	defer s.Close()
	if _, err := s.db.Exec(`ALTER TABLE spend RENAME TO away`); err != nil {
		t.Fatal(err)
	}
	s.Spent(entry("acme", "k", "m", 1, 1))
	if err := s.Flush(); err == nil || !s.Failing() {
		t.Fatalf("a write to a missing table: %v, failing %v", err, s.Failing())
	}
	s.Spent(entry("acme", "k", "m", 2, 1)) // heard during the outage
	if _, err := s.db.Exec(`ALTER TABLE away RENAME TO spend`); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(); err != nil || s.Failing() {
		t.Fatalf("the store back: %v, failing %v", err, s.Failing())
	}
	usd, tokens, err := s.Since(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), "acme", "")
	if err != nil || usd != 3 || tokens != 2 {
		t.Errorf("after the outage: $%v %d tokens %v; want $3, 2 tokens", usd, tokens, err)
	}
}

// BenchmarkSpent is what counting an answer into the books costs the
// request path (the write is the writer's, once a second).
//
//	go test -run '^$' -bench Spent ./spendstore/
func BenchmarkSpent(b *testing.B) {
	s, err := Open(false, "", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := entry("acme", "0123456789abcdef", "claude-sonnet-4-5", 0.01, 100)
	b.ReportAllocs()
	for b.Loop() {
		s.Spent(e)
	}
}

// The books are the operator's alone: in a DATA_DIR that is already 0755,
// spend.db and its -wal and -shm are made 0600 (SQLite makes a new
// database 0644 and its -wal and -shm with the database's mode), and an
// existing spend.db left 0644 by an earlier sluice is made 0600.
func TestBooksAreMadePrivate(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for round := range 2 {
		s := open(t, true, dir, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
		s.Spent(entry("acme", "k1", "m", 1.25, 100))
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"spend.db", "spend.db-wal", "spend.db-shm"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("round %d: %s is %v; want 0600", round, name, fi.Mode().Perm())
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dir, "spend.db"), 0o644) // as an earlier sluice left it
	}
}
