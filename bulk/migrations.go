package bulk

import "strings"

// migration is one versioned step of the schema. Versions are applied in
// order, each in its own transaction, and recorded in schema_migrations;
// a step is never edited once released: a change is a new step. The text
// is SQLite's; PostgreSQL's differs only in BYTEA for BLOB (see pgSQL).
type migration struct {
	version int
	sql     string
}

// pgSQL is a migration's text for PostgreSQL.
func pgSQL(sqlite string) string { return strings.ReplaceAll(sqlite, " BLOB", " BYTEA") }

var migrations = []migration{
	{version: 1,
		sql: `
CREATE TABLE credentials (
	key_hash TEXT PRIMARY KEY,
	sealed   BLOB NOT NULL
);
CREATE TABLE requests (
	id         TEXT PRIMARY KEY,
	key_hash   TEXT NOT NULL,
	idem_key   TEXT,
	body_hash  TEXT NOT NULL,
	body       BLOB,
	model      TEXT NOT NULL,
	bytes      BIGINT NOT NULL,
	status     TEXT NOT NULL,
	batch_id   TEXT,
	cancel     INTEGER NOT NULL DEFAULT 0,
	result     BLOB,
	webhook    TEXT,
	created_at BIGINT NOT NULL,
	ended_at   BIGINT
);
CREATE UNIQUE INDEX requests_idem ON requests (key_hash, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX requests_status ON requests (status, created_at);
CREATE INDEX requests_batch ON requests (batch_id);
CREATE INDEX requests_key ON requests (key_hash, id);
CREATE TABLE batches (
	id          TEXT PRIMARY KEY,
	key_hash    TEXT NOT NULL,
	upstream_id TEXT UNIQUE,
	status      TEXT NOT NULL,
	count       INTEGER NOT NULL,
	created_at  BIGINT NOT NULL,
	ended_at    BIGINT,
	owner       TEXT NOT NULL,
	lease_until BIGINT NOT NULL,
	misses      INTEGER NOT NULL DEFAULT 0,
	succeeded   INTEGER NOT NULL DEFAULT 0,
	errored     INTEGER NOT NULL DEFAULT 0,
	canceled    INTEGER NOT NULL DEFAULT 0,
	expired     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX batches_status ON batches (status);
CREATE TABLE webhooks (
	id         TEXT PRIMARY KEY,
	request_id TEXT NOT NULL,
	url        TEXT NOT NULL,
	status     TEXT NOT NULL,
	attempts   INTEGER NOT NULL DEFAULT 0,
	next_at    BIGINT NOT NULL,
	created_at BIGINT NOT NULL
);
CREATE INDEX webhooks_due ON webhooks (status, next_at);
`},
	// The per-key quota (BULK_MAX_PENDING_MB) sums the bytes of a key's
	// requests not ended at every submission: from this index alone.
	{version: 2,
		sql: `
CREATE INDEX requests_pending ON requests (key_hash, bytes) WHERE status <> 'ended';
`},
}
