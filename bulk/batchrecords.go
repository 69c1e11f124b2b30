package bulk

import (
	"context"
	"fmt"
	"strings"
)

// queuedRef is a queued request, as a window holds it.
type queuedRef struct {
	id, keyHash string
	bytes       int64
	createdAt   int64
}

// batchRow is one batch as the poller and reconciler see it.
type batchRow struct {
	id, keyHash, upstreamID, status string
	count                           int
	createdAt                       int64
	misses                          int
}

// resultRow is one line of an upstream batch's results.
type resultRow struct {
	id     string
	result []byte
}

// BatchView is one batch as the page shows it.
type BatchView struct {
	ID         string `json:"id"`
	UpstreamID string `json:"upstream_id,omitempty"`
	Key        string `json:"key"` // the credential's short hash
	Status     string `json:"status"`
	Count      int    `json:"count"`
	Succeeded  int    `json:"succeeded"`
	Errored    int    `json:"errored"`
	Canceled   int    `json:"canceled"`
	Expired    int    `json:"expired"`
	CreatedAt  int64  `json:"created_at_ms"`
	EndedAt    int64  `json:"ended_at_ms,omitempty"`
}

// queued returns the queued requests created before the given time (Unix
// ms), oldest first.
func (s *Store) queued(ctx context.Context, before int64) ([]queuedRef, error) {
	rows, err := s.r.QueryContext(ctx, s.q(`SELECT id, key_hash, bytes, created_at FROM requests WHERE status = 'queued' AND created_at < ? ORDER BY id`), before)
	if err != nil {
		return nil, fmt.Errorf("bulk: read the queue: %w", err)
	}
	defer rows.Close()
	var out []queuedRef
	for rows.Next() {
		var q queuedRef
		if err := rows.Scan(&q.id, &q.keyHash, &q.bytes, &q.createdAt); err != nil {
			return nil, fmt.Errorf("bulk: read the queue: %w", err)
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// claim takes those of ids still queued into a new batch, in one
// transaction. On PostgreSQL their rows are locked FOR UPDATE SKIP
// LOCKED: of two replicas flushing the same request, one gets it. It
// returns the ids claimed, in order.
func (s *Store) claim(ctx context.Context, batchID, keyHash string, ids []string, owner string, leaseUntil int64) ([]string, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("bulk: claim requests: %w", err)
	}
	defer tx.Rollback()
	lock := ""
	if s.pg {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	var got []string
	for start := 0; start < len(ids); start += chunk {
		list, args := in(ids[start:min(start+chunk, len(ids))])
		rows, err := tx.QueryContext(ctx, s.q(`SELECT id FROM requests WHERE status = 'queued' AND key_hash = ? AND id IN `+list+` ORDER BY id`+lock), append([]any{keyHash}, args...)...)
		if err != nil {
			return nil, fmt.Errorf("bulk: claim requests: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("bulk: claim requests: %w", err)
			}
			got = append(got, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("bulk: claim requests: %w", err)
		}
	}
	if len(got) == 0 {
		return nil, nil
	}
	for start := 0; start < len(got); start += chunk {
		list, args := in(got[start:min(start+chunk, len(got))])
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE requests SET status = 'submitting', batch_id = ? WHERE id IN `+list), append([]any{batchID}, args...)...); err != nil {
			return nil, fmt.Errorf("bulk: claim requests: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO batches (id, key_hash, status, count, created_at, owner, lease_until) VALUES (?, ?, 'creating', ?, ?, ?, ?)`),
		batchID, keyHash, len(got), nowMS(), owner, leaseUntil); err != nil {
		return nil, fmt.Errorf("bulk: record a batch: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("bulk: claim requests: %w", err)
	}
	return got, nil
}

// bodies calls fn with each request of batchID and its body, in id order,
// reading them one by one (a batch's bodies are never all in memory).
func (s *Store) bodies(ctx context.Context, batchID string, fn func(id string, body []byte) error) error {
	rows, err := s.r.QueryContext(ctx, s.q(`SELECT id, body FROM requests WHERE batch_id = ? ORDER BY id`), batchID)
	if err != nil {
		return fmt.Errorf("bulk: read bodies: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var body []byte
		if err := rows.Scan(&id, &body); err != nil {
			return fmt.Errorf("bulk: read bodies: %w", err)
		}
		if err := fn(id, body); err != nil {
			return err
		}
	}
	return rows.Err()
}

// batchIDs returns the ids of batchID's requests that have not ended.
func (s *Store) openIDs(ctx context.Context, batchID string) (map[string]bool, error) {
	rows, err := s.r.QueryContext(ctx, s.q(`SELECT id FROM requests WHERE batch_id = ? AND status <> 'ended'`), batchID)
	if err != nil {
		return nil, fmt.Errorf("bulk: read a batch's requests: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// created records the upstream batch of batchID, as soon as the create
// returned: from here on a crash resumes by polling it.
func (s *Store) created(ctx context.Context, batchID, upstreamID string) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bulk: record a created batch: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE batches SET upstream_id = ?, status = 'in_progress' WHERE id = ? AND status = 'creating'`), upstreamID, batchID); err != nil {
		return fmt.Errorf("bulk: record a created batch: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE requests SET status = 'in_progress' WHERE batch_id = ? AND status = 'submitting'`), batchID); err != nil {
		return fmt.Errorf("bulk: record a created batch: %w", err)
	}
	return tx.Commit()
}

// requeue puts batchID's requests back in the queue: the batch was never
// created (refused with a retryable answer, or not found upstream).
func (s *Store) requeue(ctx context.Context, batchID string) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bulk: requeue: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE requests SET status = 'queued', batch_id = NULL WHERE batch_id = ? AND status IN ('submitting', 'in_progress')`), batchID); err != nil {
		return fmt.Errorf("bulk: requeue: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE batches SET status = 'failed', ended_at = ? WHERE id = ? AND status = 'creating'`), nowMS(), batchID); err != nil {
		return fmt.Errorf("bulk: requeue: %w", err)
	}
	return tx.Commit()
}

// fail ends every open request of batchID with result: the create was
// refused for good (an invalid batch, a bad key).
func (s *Store) fail(ctx context.Context, batchID string, result []byte) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bulk: fail a batch: %w", err)
	}
	defer tx.Rollback()
	now := nowMS()
	if _, err := tx.ExecContext(ctx, s.q(webhookInsert+` WHERE batch_id = ? AND status <> 'ended' AND webhook IS NOT NULL`+webhookConflict), now, now, batchID); err != nil {
		return fmt.Errorf("bulk: fail a batch: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE requests SET status = 'ended', result = ?, ended_at = ?, body = NULL WHERE batch_id = ? AND status <> 'ended'`), result, now, batchID); err != nil {
		return fmt.Errorf("bulk: fail a batch: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE batches SET status = 'failed', ended_at = ? WHERE id = ?`), now, batchID); err != nil {
		return fmt.Errorf("bulk: fail a batch: %w", err)
	}
	return tx.Commit()
}

// leaseBatches takes (or renews) the lease of every batch still to be
// watched whose lease has run out or is owner's, and returns them: the
// batches this replica now polls or reconciles.
func (s *Store) leaseBatches(ctx context.Context, owner string, until int64) ([]batchRow, error) {
	now := nowMS()
	rows, err := s.w.QueryContext(ctx, s.q(`UPDATE batches SET owner = ?, lease_until = ?
		WHERE status IN ('creating', 'in_progress', 'canceling') AND (lease_until < ? OR owner = ?)
		RETURNING id, key_hash, COALESCE(upstream_id, ''), status, count, created_at, misses`), owner, until, now, owner)
	if err != nil {
		return nil, fmt.Errorf("bulk: lease batches: %w", err)
	}
	defer rows.Close()
	var out []batchRow
	for rows.Next() {
		var b batchRow
		if err := rows.Scan(&b.id, &b.keyHash, &b.upstreamID, &b.status, &b.count, &b.createdAt, &b.misses); err != nil {
			return nil, fmt.Errorf("bulk: lease batches: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// missed counts one reconciliation that did not find batchID upstream.
func (s *Store) missed(ctx context.Context, batchID string) error {
	_, err := s.w.ExecContext(ctx, s.q(`UPDATE batches SET misses = misses + 1 WHERE id = ?`), batchID)
	return err
}

// knownUpstream reports which of ids are already some batch's upstream id.
func (s *Store) knownUpstream(ctx context.Context, id string) (bool, error) {
	var n int
	err := s.r.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM batches WHERE upstream_id = ?`), id).Scan(&n)
	return n > 0, err
}

// progress records an upstream batch's counts and status.
func (s *Store) progress(ctx context.Context, batchID, status string, c counts) error {
	_, err := s.w.ExecContext(ctx, s.q(`UPDATE batches SET status = ?, succeeded = ?, errored = ?, canceled = ?, expired = ? WHERE id = ? AND status IN ('in_progress', 'canceling')`),
		status, c.Succeeded, c.Errored, c.Canceled, c.Expired, batchID)
	if err != nil {
		return fmt.Errorf("bulk: record progress: %w", err)
	}
	return nil
}

// canceledResult is what a request canceled before its result gets.
var canceledResult = []byte(`{"type":"canceled"}`)

// storeResults stores results of batchID in one transaction; a request
// whose cancel was asked gets canceled instead. A request already ended
// is left as it is, so storing the same lines twice changes nothing.
//
// A line is matched by custom_id alone (ids are unique across batches):
// if reconciliation adopted a lost create's batch for the wrong one of
// two, each request still gets its own result.
func (s *Store) storeResults(ctx context.Context, rs []resultRow) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bulk: store results: %w", err)
	}
	defer tx.Rollback()
	now := nowMS()
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.id
	}
	for start := 0; start < len(ids); start += chunk {
		list, args := in(ids[start:min(start+chunk, len(ids))])
		if _, err := tx.ExecContext(ctx, s.q(webhookInsert+` WHERE status IN ('submitting', 'in_progress') AND webhook IS NOT NULL AND id IN `+list+webhookConflict),
			append([]any{now, now}, args...)...); err != nil {
			return fmt.Errorf("bulk: store results: %w", err)
		}
	}
	update := `UPDATE requests SET status = 'ended', result = CASE WHEN cancel = 1 THEN ? ELSE ? END, ended_at = ?, body = NULL WHERE id = ? AND status IN ('submitting', 'in_progress')`
	if s.pg { // a parameter in a CASE is taken for text unless told
		update = strings.Replace(update, "THEN ? ELSE ? END", "THEN ?::bytea ELSE ?::bytea END", 1)
	}
	st, err := tx.PrepareContext(ctx, s.q(update))
	if err != nil {
		return fmt.Errorf("bulk: store results: %w", err)
	}
	defer st.Close()
	for _, r := range rs {
		if _, err := st.ExecContext(ctx, canceledResult, r.result, now, r.id); err != nil {
			return fmt.Errorf("bulk: store results: %w", err)
		}
	}
	return tx.Commit()
}

// endBatch marks batchID ended. Its requests the results did not name go
// back to the queue: the batch adopted by reconciliation was not theirs.
func (s *Store) endBatch(ctx context.Context, batchID string, c counts) (requeued int64, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("bulk: end a batch: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE batches SET status = 'ended', ended_at = ?, succeeded = ?, errored = ?, canceled = ?, expired = ? WHERE id = ?`),
		nowMS(), c.Succeeded, c.Errored, c.Canceled, c.Expired, batchID); err != nil {
		return 0, fmt.Errorf("bulk: end a batch: %w", err)
	}
	res, err := tx.ExecContext(ctx, s.q(`UPDATE requests SET status = 'queued', batch_id = NULL WHERE batch_id = ? AND status <> 'ended'`), batchID)
	if err != nil {
		return 0, fmt.Errorf("bulk: end a batch: %w", err)
	}
	requeued, _ = res.RowsAffected()
	return requeued, tx.Commit()
}

// cancelOpen reports whether every open request of batchID has asked to
// be canceled (and there is at least one).
func (s *Store) allCanceled(ctx context.Context, batchID string) (bool, error) {
	var open, canceled int
	err := s.r.QueryRowContext(ctx, s.q(`SELECT COUNT(*), COALESCE(SUM(cancel), 0) FROM requests WHERE batch_id = ? AND status <> 'ended'`), batchID).Scan(&open, &canceled)
	return open > 0 && open == canceled, err
}

// setStatus sets a batch's status (canceling, once its cancel was sent).
func (s *Store) setBatchStatus(ctx context.Context, batchID, status string) error {
	_, err := s.w.ExecContext(ctx, s.q(`UPDATE batches SET status = ? WHERE id = ?`), status, batchID)
	return err
}

// recentBatches returns the newest batches, for the page.
func (s *Store) recentBatches(ctx context.Context, limit int) ([]BatchView, error) {
	rows, err := s.r.QueryContext(ctx, s.q(`SELECT id, COALESCE(upstream_id, ''), key_hash, status, count, succeeded, errored, canceled, expired, created_at, COALESCE(ended_at, 0) FROM batches ORDER BY id DESC LIMIT ?`), limit)
	if err != nil {
		return nil, fmt.Errorf("bulk: list batches: %w", err)
	}
	defer rows.Close()
	var out []BatchView
	for rows.Next() {
		var b BatchView
		if err := rows.Scan(&b.ID, &b.UpstreamID, &b.Key, &b.Status, &b.Count, &b.Succeeded, &b.Errored, &b.Canceled, &b.Expired, &b.CreatedAt, &b.EndedAt); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, rows.Err()
}
