package bulk

import (
	"context"
	"fmt"
)

const (
	webhookInsert   = `INSERT INTO webhooks (id, request_id, url, status, attempts, next_at, created_at) SELECT 'whk_' || id, id, webhook, 'pending', 0, ?, ? FROM requests`
	webhookConflict = ` ON CONFLICT (id) DO NOTHING`
)

// webhookDue is one delivery to attempt.
type webhookDue struct {
	id, requestID, keyHash, url string
	attempts                    int
}

// dueWebhooks takes up to limit deliveries whose time has come, pushing
// their next attempt to leaseUntil so that no other replica takes them
// meanwhile.
func (s *Store) dueWebhooks(ctx context.Context, limit int, leaseUntil int64) ([]webhookDue, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("bulk: due webhooks: %w", err)
	}
	defer tx.Rollback()
	lock := ""
	if s.pg {
		lock = " FOR UPDATE OF w SKIP LOCKED"
	}
	rows, err := tx.QueryContext(ctx, s.q(`SELECT w.id, w.request_id, r.key_hash, w.url, w.attempts FROM webhooks w JOIN requests r ON r.id = w.request_id
		WHERE w.status = 'pending' AND w.next_at <= ? ORDER BY w.next_at LIMIT ?`+lock), nowMS(), limit)
	if err != nil {
		return nil, fmt.Errorf("bulk: due webhooks: %w", err)
	}
	var out []webhookDue
	for rows.Next() {
		var d webhookDue
		if err := rows.Scan(&d.id, &d.requestID, &d.keyHash, &d.url, &d.attempts); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, d)
	}
	rows.Close()
	for _, d := range out {
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE webhooks SET next_at = ? WHERE id = ?`), leaseUntil, d.id); err != nil {
			return nil, fmt.Errorf("bulk: due webhooks: %w", err)
		}
	}
	return out, tx.Commit()
}

// webhookTried records one delivery attempt: delivered, to be retried at
// next, or given up.
func (s *Store) webhookTried(ctx context.Context, id, status string, attempts int, next int64) error {
	_, err := s.w.ExecContext(ctx, s.q(`UPDATE webhooks SET status = ?, attempts = ?, next_at = ? WHERE id = ?`), status, attempts, next, id)
	return err
}
