package spendstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/keystore"
)

// The keys store on SQLite and on PostgreSQL: names are unique, a revoked
// key stays (revoked) and cannot change, every change moves the version
// and writes its audit line, and a store reopened holds what was written.
func TestKeysStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	dsn := pgtest.Start(t)
	for _, kind := range []string{"sqlite", "postgresql"} {
		t.Run(kind, func(t *testing.T) {
			open := func() *Store {
				var s *Store
				var err error
				if kind == "sqlite" {
					s, err = Open(true, dir, nil)
				} else {
					s, err = OpenPostgres(ctx, dsn, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			s := open()
			at := time.Now().UTC().Truncate(time.Millisecond)
			ch := func(action, target string) keystore.Change {
				return keystore.Change{At: at, Who: "test from 127.0.0.1", Action: action, Target: target, Detail: "{}"}
			}
			v0, err := s.Version(ctx)
			if err != nil {
				t.Fatal(err)
			}
			k := keystore.Key{Name: "alice", SHA256: "aa", Tenant: "acme", Created: at}
			if err := s.CreateKey(ctx, k, ch("key.create", "alice")); err != nil {
				t.Fatal(err)
			}
			if err := s.CreateKey(ctx, keystore.Key{Name: "alice", SHA256: "bb"}, ch("key.create", "alice")); !errors.Is(err, keystore.ErrExists) {
				t.Errorf("a second key named alice: %v, want ErrExists", err)
			}
			if err := s.CreateKey(ctx, keystore.Key{Name: "bob", SHA256: "aa"}, ch("key.create", "bob")); !errors.Is(err, keystore.ErrExists) {
				t.Errorf("a second key of alice's hash: %v, want ErrExists", err)
			}
			if _, err := s.UpdateKey(ctx, "alice", func(k *keystore.Key) error { k.Tenant = "beta"; return nil }, ch("key.update", "alice")); err != nil {
				t.Fatal(err)
			}
			if err := s.RevokeKey(ctx, "alice", ch("key.revoke", "alice")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.UpdateKey(ctx, "alice", func(*keystore.Key) error { return nil }, ch("key.update", "alice")); !errors.Is(err, keystore.ErrRevoked) {
				t.Errorf("changing a revoked key: %v, want ErrRevoked", err)
			}
			if err := s.RevokeKey(ctx, "nobody", ch("key.revoke", "nobody")); !errors.Is(err, keystore.ErrNotFound) {
				t.Errorf("revoking no key: %v, want ErrNotFound", err)
			}
			usd := 5.0
			b := keystore.Budget{Name: "acme-day", Scope: "tenant", Target: "acme"}
			b.Amount.USD, b.Amount.Period = &usd, "day"
			if created, err := s.PutBudget(ctx, b, ch("budget.put", "acme-day")); err != nil || !created {
				t.Fatalf("PutBudget: %v, %v", created, err)
			}
			if created, err := s.PutBudget(ctx, b, ch("budget.put", "acme-day")); err != nil || created {
				t.Fatalf("PutBudget again: %v, %v", created, err)
			}
			s.Close()

			s = open()
			defer s.Close()
			keys, err := s.Keys(ctx)
			if err != nil || len(keys) != 1 || keys[0].Tenant != "beta" || !keys[0].Revoked.Equal(at) {
				t.Errorf("reopened, the keys are %+v, %v", keys, err)
			}
			bs, err := s.Budgets(ctx)
			if err != nil || len(bs) != 1 || *bs[0].Amount.USD != 5 {
				t.Errorf("reopened, the budgets are %+v, %v", bs, err)
			}
			if err := s.DeleteBudget(ctx, "acme-day", ch("budget.delete", "acme-day")); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteBudget(ctx, "acme-day", ch("budget.delete", "acme-day")); !errors.Is(err, keystore.ErrNotFound) {
				t.Errorf("deleting it twice: %v", err)
			}
			v, _ := s.Version(ctx)
			audit, err := s.Audit(ctx, 100, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Refused changes roll back: neither a version nor a line.
			want := []string{"budget.delete", "budget.put", "budget.put", "key.revoke", "key.update", "key.create"}
			if int(v-v0) != len(want) || len(audit) != len(want) {
				t.Fatalf("version moved %d, audit %+v; want %d changes", v-v0, audit, len(want))
			}
			for i, a := range audit {
				if a.Action != want[i] || !a.At.Equal(at) || a.Who == "" {
					t.Errorf("audit line %d: %+v, want %s", i, a, want[i])
				}
			}
			page, _ := s.Audit(ctx, 2, audit[1].Seq)
			if len(page) != 2 || page[0].Seq != audit[2].Seq {
				t.Errorf("the page before seq %d: %+v", audit[1].Seq, page)
			}
		})
	}
}
