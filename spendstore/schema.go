package spendstore

import (
	"context"
	"fmt"
	"time"
)

// schema is the books' table, version 1 (PRAGMA user_version).
const schema = `
CREATE TABLE IF NOT EXISTS spend (
	bucket INTEGER NOT NULL,
	tenant TEXT NOT NULL,
	key TEXT NOT NULL,
	model TEXT NOT NULL,
	usd REAL NOT NULL,
	estimated_usd REAL NOT NULL,
	tokens INTEGER NOT NULL,
	answers INTEGER NOT NULL,
	PRIMARY KEY (bucket, tenant, key, model)
);
CREATE INDEX IF NOT EXISTS spend_by_tenant ON spend (tenant, bucket);
CREATE INDEX IF NOT EXISTS spend_by_key ON spend (key, bucket);
PRAGMA user_version = 1;`

// pgSchema is the books' tables on PostgreSQL: spend as SQLite's with the
// replica that wrote each row in its key, and spend_writes, the last write
// of each replica by its number, so that a write retried after its commit
// was lost is not counted twice.
const pgSchema = `
CREATE TABLE IF NOT EXISTS spend (
	bucket BIGINT NOT NULL,
	tenant TEXT NOT NULL,
	key TEXT NOT NULL,
	model TEXT NOT NULL,
	replica TEXT NOT NULL,
	usd DOUBLE PRECISION NOT NULL,
	estimated_usd DOUBLE PRECISION NOT NULL,
	tokens BIGINT NOT NULL,
	answers BIGINT NOT NULL,
	PRIMARY KEY (bucket, tenant, key, model, replica)
);
CREATE INDEX IF NOT EXISTS spend_by_tenant ON spend (tenant, bucket);
CREATE INDEX IF NOT EXISTS spend_by_key ON spend (key, bucket);
CREATE TABLE IF NOT EXISTS spend_writes (
	replica TEXT NOT NULL,
	seq BIGINT NOT NULL,
	at BIGINT NOT NULL,
	PRIMARY KEY (replica, seq)
);`

func (s *Store) migratePostgres(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("spend store: PostgreSQL: %w", err)
	}
	defer tx.Rollback()
	// Replicas starting together create the tables one at a time (the
	// bulk store's migrations hold lock 5151).
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(5152)`); err != nil {
		return fmt.Errorf("spend store: PostgreSQL: lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, pgSchema+pgKeysSchema); err != nil {
		return fmt.Errorf("spend store: PostgreSQL: create the tables: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("spend store: PostgreSQL: %w", err)
	}
	return nil
}

func (s *Store) migrate() error {
	var v int
	if err := s.db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("spend store %s: %w", s.where, err)
	}
	if v > 1 {
		return fmt.Errorf("spend store %s: schema version %d is newer than this sluice knows (1); run the newer sluice, or move the file aside", s.where, v)
	}
	if _, err := s.db.Exec(schema + keysSchema); err != nil {
		return fmt.Errorf("spend store %s: create the schema: %w", s.where, err)
	}
	return nil
}
