package bulk

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// credential returns keyHash's sealed credential, or nil once deleted.
func (s *Store) credential(ctx context.Context, keyHash string) ([]byte, error) {
	var sealed []byte
	err := s.r.QueryRowContext(ctx, s.q(`SELECT sealed FROM credentials WHERE key_hash = ?`), keyHash).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bulk: read a credential: %w", err)
	}
	return sealed, nil
}

// dropCredentials deletes the credentials no open request needs, and
// reports how many.
func (s *Store) dropCredentials(ctx context.Context) (int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT key_hash FROM credentials c WHERE NOT EXISTS (SELECT 1 FROM requests r WHERE r.key_hash = c.key_hash AND r.status <> 'ended')`)
	if err != nil {
		return 0, fmt.Errorf("bulk: find unused credentials: %w", err)
	}
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return 0, err
		}
		keys = append(keys, k)
	}
	rows.Close()
	n := 0
	for _, k := range keys {
		ok, err := s.dropCredential(ctx, k)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

func (s *Store) dropCredential(ctx context.Context, keyHash string) (bool, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("bulk: drop a credential: %w", err)
	}
	defer tx.Rollback()
	if s.pg {
		// Waits for a submission storing this credential to commit; the
		// count below, a statement of its own, then sees that submission.
		if _, err := tx.ExecContext(ctx, `SELECT key_hash FROM credentials WHERE key_hash = $1 FOR UPDATE`, keyHash); err != nil {
			return false, fmt.Errorf("bulk: drop a credential: %w", err)
		}
	}
	var open int
	if err := tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM requests WHERE key_hash = ? AND status <> 'ended'`), keyHash).Scan(&open); err != nil {
		return false, fmt.Errorf("bulk: drop a credential: %w", err)
	}
	if open > 0 {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM credentials WHERE key_hash = ?`), keyHash); err != nil {
		return false, fmt.Errorf("bulk: drop a credential: %w", err)
	}
	return true, tx.Commit()
}
