package spendstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/keystore"
)

// The store is also a keystore.Store: the sluice keys and budgets the
// admin API changes (INBOUND_KEYS_STORE), and their audit, in tables
// beside the books. A key's row holds its SHA-256, never the key. Each
// change runs in one transaction that first bumps the one row of
// sluice_admin_version: changes are serialised by that row's lock, and a
// replica that reads the version learns of every committed change (a
// sequence's numbers would not do: on PostgreSQL a number taken first may
// commit last).
var _ keystore.Store = (*Store)(nil)

// keysSchema and pgKeysSchema are the keys' tables. Added beside the
// books' without a new user_version: a sluice that predates them ignores
// them.
const keysSchema = `
CREATE TABLE IF NOT EXISTS sluice_keys (
	name TEXT PRIMARY KEY,
	sha256 TEXT NOT NULL UNIQUE,
	record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sluice_budgets (
	name TEXT PRIMARY KEY,
	record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sluice_audit (
	seq INTEGER PRIMARY KEY AUTOINCREMENT,
	at INTEGER NOT NULL,
	who TEXT NOT NULL,
	action TEXT NOT NULL,
	target TEXT NOT NULL,
	detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sluice_admin_version (
	id INTEGER PRIMARY KEY,
	version INTEGER NOT NULL
);
INSERT INTO sluice_admin_version (id, version) VALUES (1, 0) ON CONFLICT DO NOTHING;`

const pgKeysSchema = `
CREATE TABLE IF NOT EXISTS sluice_keys (
	name TEXT PRIMARY KEY,
	sha256 TEXT NOT NULL UNIQUE,
	record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sluice_budgets (
	name TEXT PRIMARY KEY,
	record TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sluice_audit (
	seq BIGSERIAL PRIMARY KEY,
	at BIGINT NOT NULL,
	who TEXT NOT NULL,
	action TEXT NOT NULL,
	target TEXT NOT NULL,
	detail TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS sluice_admin_version (
	id INTEGER PRIMARY KEY,
	version BIGINT NOT NULL
);
INSERT INTO sluice_admin_version (id, version) VALUES (1, 0) ON CONFLICT DO NOTHING;`

// Version is the number of changes made to the keys and budgets.
func (s *Store) Version(ctx context.Context) (int64, error) {
	var v int64
	if err := s.db.QueryRowContext(ctx, `SELECT version FROM sluice_admin_version WHERE id = 1`).Scan(&v); err != nil {
		return 0, s.keysErr(err)
	}
	return v, nil
}

// Keys is every key, revoked ones too, by name.
func (s *Store) Keys(ctx context.Context) ([]keystore.Key, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT record FROM sluice_keys ORDER BY name`)
	if err != nil {
		return nil, s.keysErr(err)
	}
	return scanRecords[keystore.Key](rows, s)
}

// Budgets is every budget of the store, by name.
func (s *Store) Budgets(ctx context.Context) ([]keystore.Budget, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT record FROM sluice_budgets ORDER BY name`)
	if err != nil {
		return nil, s.keysErr(err)
	}
	return scanRecords[keystore.Budget](rows, s)
}

func scanRecords[T any](rows *sql.Rows, s *Store) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			return nil, s.keysErr(err)
		}
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("keys store %s: a record does not read: %w", s.where, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, s.keysErr(err)
	}
	return out, nil
}

// CreateKey adds k; ErrExists if its name or its hash is taken.
func (s *Store) CreateKey(ctx context.Context, k keystore.Key, c keystore.Change) error {
	return s.change(ctx, c, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM sluice_keys WHERE name = ? OR sha256 = ?`), k.Name, k.SHA256).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return keystore.ErrExists
		}
		b, _ := json.Marshal(k)
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO sluice_keys (name, sha256, record) VALUES (?, ?, ?)`), k.Name, k.SHA256, string(b))
		return err
	})
}

// UpdateKey applies edit to the key named name and stores it.
func (s *Store) UpdateKey(ctx context.Context, name string, edit func(*keystore.Key) error, c keystore.Change) (keystore.Key, error) {
	var k keystore.Key
	var editErr error
	err := s.change(ctx, c, func(tx *sql.Tx) error {
		if err := s.readKey(ctx, tx, name, &k); err != nil {
			return err
		}
		if !k.Revoked.IsZero() {
			return keystore.ErrRevoked
		}
		if editErr = edit(&k); editErr != nil {
			return editErr
		}
		k.Name = name // not renamed: budgets name it
		b, _ := json.Marshal(k)
		_, err := tx.ExecContext(ctx, s.q(`UPDATE sluice_keys SET record = ? WHERE name = ?`), string(b), name)
		return err
	})
	if editErr != nil {
		return k, editErr // the caller's own word, as it said it
	}
	return k, err
}

// RevokeKey marks the key named name revoked, as of c.At. Revoking a
// revoked key changes nothing and is no error.
func (s *Store) RevokeKey(ctx context.Context, name string, c keystore.Change) error {
	return s.change(ctx, c, func(tx *sql.Tx) error {
		var k keystore.Key
		if err := s.readKey(ctx, tx, name, &k); err != nil {
			return err
		}
		if k.Revoked.IsZero() {
			k.Revoked = c.At
		}
		b, _ := json.Marshal(k)
		_, err := tx.ExecContext(ctx, s.q(`UPDATE sluice_keys SET record = ? WHERE name = ?`), string(b), name)
		return err
	})
}

func (s *Store) readKey(ctx context.Context, tx *sql.Tx, name string, k *keystore.Key) error {
	var b []byte
	err := tx.QueryRowContext(ctx, s.q(`SELECT record FROM sluice_keys WHERE name = ?`), name).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return keystore.ErrNotFound
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(b, k)
}

// PutBudget creates or replaces the budget named b.Name.
func (s *Store) PutBudget(ctx context.Context, b keystore.Budget, c keystore.Change) (created bool, err error) {
	err = s.change(ctx, c, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM sluice_budgets WHERE name = ?`), b.Name).Scan(&n); err != nil {
			return err
		}
		created = n == 0
		rec, _ := json.Marshal(b)
		q := `UPDATE sluice_budgets SET record = ? WHERE name = ?`
		if created {
			q = `INSERT INTO sluice_budgets (record, name) VALUES (?, ?)`
		}
		_, err := tx.ExecContext(ctx, s.q(q), string(rec), b.Name)
		return err
	})
	return created, err
}

// DeleteBudget removes the budget named name.
func (s *Store) DeleteBudget(ctx context.Context, name string, c keystore.Change) error {
	return s.change(ctx, c, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q(`DELETE FROM sluice_budgets WHERE name = ?`), name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return keystore.ErrNotFound
		}
		return nil
	})
}

// Audit is the last limit changes before before (0: the newest first).
func (s *Store) Audit(ctx context.Context, limit int, before int64) ([]keystore.Numbered, error) {
	q, args := `SELECT seq, at, who, action, target, detail FROM sluice_audit`, []any{}
	if before > 0 {
		q += ` WHERE seq < ?`
		args = append(args, before)
	}
	q += ` ORDER BY seq DESC LIMIT ?`
	rows, err := s.db.QueryContext(ctx, s.q(q), append(args, limit)...)
	if err != nil {
		return nil, s.keysErr(err)
	}
	defer rows.Close()
	out := []keystore.Numbered{}
	for rows.Next() {
		var n keystore.Numbered
		var at int64
		if err := rows.Scan(&n.Seq, &at, &n.Who, &n.Action, &n.Target, &n.Detail); err != nil {
			return nil, s.keysErr(err)
		}
		n.At = time.UnixMilli(at).UTC()
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, s.keysErr(err)
	}
	return out, nil
}

// change runs do in a transaction that bumps the version first (taking
// its row's lock) and writes c to the audit last.
func (s *Store) change(ctx context.Context, c keystore.Change, do func(*sql.Tx) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.keysErr(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE sluice_admin_version SET version = version + 1 WHERE id = 1`); err != nil {
		return s.keysErr(err)
	}
	if err := do(tx); err != nil {
		if errors.Is(err, keystore.ErrExists) || errors.Is(err, keystore.ErrNotFound) || errors.Is(err, keystore.ErrRevoked) {
			return err
		}
		return s.keysErr(err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO sluice_audit (at, who, action, target, detail) VALUES (?, ?, ?, ?, ?)`),
		c.At.UnixMilli(), c.Who, c.Action, c.Target, c.Detail); err != nil {
		return s.keysErr(err)
	}
	return s.keysErr(tx.Commit())
}

// keysErr names the store in err, with a DSN a driver quoted cut out.
func (s *Store) keysErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("keys store %s: %s", s.where, s.errText(err))
}
