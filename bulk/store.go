package bulk

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	_ "modernc.org/sqlite"             // the "sqlite" driver, no cgo

	"github.com/sluicehq/sluice/internal/sqlq"
)

// Request statuses, as GET /v1/bulk/messages/{id} reports them.
const (
	StatusQueued     = "queued"      // stored, waiting in a window
	StatusSubmitting = "submitting"  // in a batch whose create is under way
	StatusInProgress = "in_progress" // in an upstream batch
	StatusEnded      = "ended"       // its result is stored
)

// Batch statuses, in the store and on the page.
const (
	batchCreating   = "creating"    // claimed; the create is under way or its answer was lost
	batchInProgress = "in_progress" // the upstream has it
	batchCanceling  = "canceling"
	batchEnded      = "ended"
	batchFailed     = "failed" // never created: its requests went back to the queue or ended errored
)

// Store is where submissions, batches, results and sealed credentials
// live: SQLite in a data directory, or PostgreSQL by DSN. Every method is
// safe for concurrent use, also across processes sharing one PostgreSQL.
type Store struct {
	w, r *sql.DB // writes and reads; one and the same pool on PostgreSQL
	pg   bool
	// where names the store for logs, without a password.
	where string
}

// OpenStore opens spec: "sqlite" (a file in dataDir) or a postgres:// or
// postgresql:// DSN, and brings its schema up to date.
func OpenStore(ctx context.Context, spec, dataDir string) (*Store, error) {
	var s *Store
	switch {
	case spec == "" || spec == "sqlite":
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("bulk: create DATA_DIR: %w", err)
		}
		path := filepath.Join(dataDir, "bulk.db")
		if err := sqlq.PrivateFile(path); err != nil { // it holds prompts
			return nil, fmt.Errorf("bulk: %w", err)
		}
		// WAL lets reads go on beside the one writer; synchronous FULL
		// makes each commit durable before the 202 it precedes.
		dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)&_txlock=immediate"
		w, err := sql.Open("sqlite", dsn)
		if err != nil {
			return nil, fmt.Errorf("bulk: open %s: %w", path, err)
		}
		w.SetMaxOpenConns(1)
		r, err := sql.Open("sqlite", dsn)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("bulk: open %s: %w", path, err)
		}
		r.SetMaxOpenConns(4)
		s = &Store{w: w, r: r, where: path}
	case strings.HasPrefix(spec, "postgres://") || strings.HasPrefix(spec, "postgresql://"):
		db, err := sql.Open("pgx", spec)
		if err != nil {
			return nil, fmt.Errorf("bulk: open PostgreSQL: %s", redactErr(err, spec))
		}
		db.SetMaxOpenConns(8)
		s = &Store{w: db, r: db, pg: true, where: "postgresql"}
	default:
		return nil, errors.New(`bulk: BULK_STORE must be "sqlite" or a postgres:// DSN`)
	}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// redactErr is err's text with the DSN (which may hold a password) cut out.
func redactErr(err error, dsn string) string {
	return strings.ReplaceAll(err.Error(), dsn, "[BULK_STORE]")
}

// Close closes the pools.
func (s *Store) Close() {
	s.w.Close()
	if s.r != s.w {
		s.r.Close()
	}
}

// q rewrites ? placeholders as $1, $2... for PostgreSQL.
func (s *Store) q(query string) string {
	if !s.pg {
		return query
	}
	return sqlq.Dollar(query)
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bulk: migrate: %w", err)
	}
	defer tx.Rollback()
	if s.pg {
		// Replicas starting together migrate one at a time.
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(5151)`); err != nil {
			return fmt.Errorf("bulk: migrate: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at BIGINT NOT NULL)`); err != nil {
		return fmt.Errorf("bulk: migrate: %w", err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("bulk: migrate: %w", err)
	}
	if latest := migrations[len(migrations)-1].version; have > latest {
		return fmt.Errorf("bulk: the store's schema is version %d, newer than this sluice knows (%d): run a newer sluice", have, latest)
	}
	for _, m := range migrations {
		if m.version <= have {
			continue
		}
		text := m.sql
		if s.pg {
			text = pgSQL(text)
		}
		for stmt := range strings.SplitSeq(text, ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("bulk: migrate to version %d: %w", m.version, err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)`), m.version, nowMS()); err != nil {
			return fmt.Errorf("bulk: migrate to version %d: %w", m.version, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("bulk: migrate: %w", err)
	}
	return nil
}

// SchemaVersion reports the version the store's schema is at.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	var v int
	err := s.r.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

// Where names the store for a log line: the SQLite file, or "postgresql"
// (never the DSN, which may carry a password).
func (s *Store) Where() string { return s.where }
