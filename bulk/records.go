package bulk

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Request is one stored submission as its submitter sees it.
type Request struct {
	ID      string
	KeyHash string
	Model   string
	Status  string
	// UpstreamBatch is the Message Batch that carries it, once created.
	UpstreamBatch string
	Canceled      bool // cancel was asked
	Result        json.RawMessage
	CreatedAt     int64 // Unix milliseconds
	EndedAt       int64 // 0 until ended
}

// newRequest is a submission on its way into the store.
type newRequest struct {
	Request
	idemKey  string
	bodyHash string
	body     []byte
	webhook  string
	sealed   []byte // the submitter's credential, sealed

	// Set by insert: the request already stored under idemKey (same
	// body), or errIdemConflict.
	existing *Request
	err      error
}

var errIdemConflict = errors.New("idempotency key reused with another body")

// quotaError refuses a submission that would take its key past its quota
// of bytes stored and not ended (Config.MaxPendingBytes).
type quotaError struct {
	stored, size, quota int64
}

func (e *quotaError) Error() string {
	return fmt.Sprintf("this API key has %s of bulk requests stored that have not ended; this one, %s, would take it past its quota of %s (BULK_MAX_PENDING_MB)",
		byteSize(e.stored), byteSize(e.size), byteSize(e.quota))
}

// byteSize says n in bytes, or in MB from 1 MB up.
func byteSize(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
}

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

func nowMS() int64 { return time.Now().UnixMilli() }

const chunk = 500 // ids per IN (...) list

// in returns "(?,?,...)" for n ids and the ids as arguments.
func in(ids []string) (string, []any) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return "(" + strings.TrimSuffix(strings.Repeat("?,", len(ids)), ",") + ")", args
}

// insert stores a group of submissions in one transaction, one commit for
// all (the group commit): each one's 202 waits for it. A submission whose
// idempotency key is taken gets existing or errIdemConflict instead, and
// one that would take its key's bytes not ended past quota a *quotaError.
func (s *Store) insert(ctx context.Context, subs []*newRequest, quota int64) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bulk: store submissions: %w", err)
	}
	defer tx.Rollback()
	// DO NOTHING on a taken Idempotency-Key: another replica may store the
	// same one between the look-up below and this insert, and a broken
	// unique index would fail the whole group's transaction, everyone's
	// submissions with it. The insert then waits for that replica's
	// commit, and the look-up is made again.
	ins, err := tx.PrepareContext(ctx, s.q(`INSERT INTO requests (id, key_hash, idem_key, body_hash, body, model, bytes, status, webhook, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?)
		ON CONFLICT (key_hash, idem_key) WHERE idem_key IS NOT NULL DO NOTHING`))
	if err != nil {
		return fmt.Errorf("bulk: store submissions: %w", err)
	}
	defer ins.Close()
	// DO UPDATE, not DO NOTHING: it locks the credential's row on
	// PostgreSQL, so that dropCredentials waits for this transaction. And
	// the newest credential wins: under inbound keys a row is a sluice
	// key's, holding the upstream key sluice held at the submission, which
	// the operator may have rotated since (for a client's own key, the
	// row's hash is the credential's, which stays the same).
	cred, err := tx.PrepareContext(ctx, s.q(`INSERT INTO credentials (key_hash, sealed) VALUES (?, ?) ON CONFLICT (key_hash) DO UPDATE SET sealed = excluded.sealed`))
	if err != nil {
		return fmt.Errorf("bulk: store submissions: %w", err)
	}
	defer cred.Close()
	// In one order on every replica, by key and Idempotency-Key, so that
	// two groups that share keys take their rows' locks in the same order
	// (PostgreSQL would otherwise end one of them as a deadlock).
	subs = slices.Clone(subs)
	slices.SortStableFunc(subs, func(a, b *newRequest) int {
		return cmp.Or(cmp.Compare(a.KeyHash, b.KeyHash), cmp.Compare(a.idemKey, b.idemKey))
	})
	// taken looks up n's Idempotency-Key: the request already under it
	// (same body) becomes n.existing, another body n.err.
	taken := func(n *newRequest) (bool, error) {
		var ex Request
		var hash string
		err := tx.QueryRowContext(ctx, s.q(`SELECT id, body_hash, model, status, created_at FROM requests WHERE key_hash = ? AND idem_key = ?`), n.KeyHash, n.idemKey).
			Scan(&ex.ID, &hash, &ex.Model, &ex.Status, &ex.CreatedAt)
		switch {
		case err == nil && hash == n.bodyHash:
			n.existing = &ex
			return true, nil
		case err == nil:
			n.err = errIdemConflict
			return true, nil
		case !errors.Is(err, sql.ErrNoRows):
			return false, fmt.Errorf("bulk: look up an idempotency key: %w", err)
		}
		return false, nil
	}
	// pending is each key's bytes not ended, read once per group after the
	// key's credential row is locked (below), plus what this group adds.
	pending := map[string]int64{}
	for _, n := range subs {
		if n.idemKey != "" {
			if ok, err := taken(n); err != nil {
				return err
			} else if ok {
				continue
			}
		}
		stored, seen := pending[n.KeyHash]
		if !seen {
			if _, err := cred.ExecContext(ctx, n.KeyHash, n.sealed); err != nil {
				return fmt.Errorf("bulk: store a credential: %w", err)
			}
			// Read after the upsert: on PostgreSQL it holds the key's
			// credential row locked until this commit, so another
			// replica's group of the same key waits here and then, a new
			// statement under READ COMMITTED, sees this group's rows; two
			// replicas cannot both fill the last of a quota. SQLite has
			// one writer at a time.
			if err := tx.QueryRowContext(ctx, s.q(`SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) FROM requests WHERE key_hash = ? AND status <> 'ended'`), n.KeyHash).Scan(&stored); err != nil {
				return fmt.Errorf("bulk: count a key's stored bytes: %w", err)
			}
		}
		if size := int64(len(n.body)); stored+size > quota {
			n.err = &quotaError{stored: stored, size: size, quota: quota}
			pending[n.KeyHash] = stored
			continue
		}
		pending[n.KeyHash] = stored + int64(len(n.body))
		var idem, hook any
		if n.idemKey != "" {
			idem = n.idemKey
		}
		if n.webhook != "" {
			hook = n.webhook
		}
		res, err := ins.ExecContext(ctx, n.ID, n.KeyHash, idem, n.bodyHash, n.body, n.Model, int64(len(n.body)), hook, n.CreatedAt)
		if err != nil {
			return fmt.Errorf("bulk: store a submission: %w", err)
		}
		if added, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("bulk: store a submission: %w", err)
		} else if added == 0 { // the key was taken meanwhile, by another replica
			pending[n.KeyHash] -= int64(len(n.body))
			if ok, err := taken(n); err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("bulk: store a submission: Idempotency-Key %q neither stored nor found", n.idemKey)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("bulk: commit submissions: %w", err)
	}
	return nil
}

const requestColumns = `r.id, r.key_hash, r.model, r.status, r.cancel, r.result, r.created_at, COALESCE(r.ended_at, 0), COALESCE(b.upstream_id, '')`

func scanRequest(sc interface{ Scan(...any) error }) (*Request, error) {
	var r Request
	var cancel int
	var result []byte
	if err := sc.Scan(&r.ID, &r.KeyHash, &r.Model, &r.Status, &cancel, &result, &r.CreatedAt, &r.EndedAt, &r.UpstreamBatch); err != nil {
		return nil, err
	}
	r.Canceled = cancel != 0
	if result != nil {
		r.Result = json.RawMessage(result)
	}
	return &r, nil
}

// get returns keyHash's request id, or nil if there is none.
func (s *Store) get(ctx context.Context, keyHash, id string) (*Request, error) {
	row := s.r.QueryRowContext(ctx, s.q(`SELECT `+requestColumns+` FROM requests r LEFT JOIN batches b ON b.id = r.batch_id WHERE r.id = ? AND r.key_hash = ?`), id, keyHash)
	r, err := scanRequest(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bulk: read a request: %w", err)
	}
	return r, nil
}

// list returns up to limit of keyHash's requests, newest first, after
// (older than) afterID or before (newer than) beforeID, and whether there
// are more.
func (s *Store) list(ctx context.Context, keyHash, status, afterID, beforeID string, limit int) ([]*Request, bool, error) {
	where := `r.key_hash = ?`
	args := []any{keyHash}
	if status != "" {
		where += ` AND r.status = ?`
		args = append(args, status)
	}
	order := "DESC"
	switch {
	case afterID != "":
		where += ` AND r.id < ?`
		args = append(args, afterID)
	case beforeID != "":
		where += ` AND r.id > ?`
		args = append(args, beforeID)
		order = "ASC"
	}
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, s.q(`SELECT `+requestColumns+` FROM requests r LEFT JOIN batches b ON b.id = r.batch_id WHERE `+where+` ORDER BY r.id `+order+` LIMIT ?`), args...)
	if err != nil {
		return nil, false, fmt.Errorf("bulk: list requests: %w", err)
	}
	defer rows.Close()
	var out []*Request
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, false, fmt.Errorf("bulk: list requests: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("bulk: list requests: %w", err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	if order == "ASC" {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, more, nil
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

const (
	webhookInsert   = `INSERT INTO webhooks (id, request_id, url, status, attempts, next_at, created_at) SELECT 'whk_' || id, id, webhook, 'pending', 0, ?, ? FROM requests`
	webhookConflict = ` ON CONFLICT (id) DO NOTHING`
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

// cancel asks to cancel keyHash's request id: a queued one ends canceled
// at once; a submitted one is marked, and its result will be canceled.
func (s *Store) cancel(ctx context.Context, keyHash, id string) (*Request, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("bulk: cancel: %w", err)
	}
	defer tx.Rollback()
	lock := ""
	if s.pg {
		lock = " FOR UPDATE"
	}
	var status string
	err = tx.QueryRowContext(ctx, s.q(`SELECT status FROM requests WHERE id = ? AND key_hash = ?`+lock), id, keyHash).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bulk: cancel: %w", err)
	}
	now := nowMS()
	switch status {
	case StatusQueued:
		if _, err := tx.ExecContext(ctx, s.q(webhookInsert+` WHERE id = ? AND webhook IS NOT NULL`+webhookConflict), now, now, id); err != nil {
			return nil, fmt.Errorf("bulk: cancel: %w", err)
		}
		_, err = tx.ExecContext(ctx, s.q(`UPDATE requests SET status = 'ended', cancel = 1, result = ?, ended_at = ?, body = NULL WHERE id = ?`), canceledResult, now, id)
	case StatusSubmitting, StatusInProgress:
		_, err = tx.ExecContext(ctx, s.q(`UPDATE requests SET cancel = 1 WHERE id = ?`), id)
	}
	if err != nil {
		return nil, fmt.Errorf("bulk: cancel: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("bulk: cancel: %w", err)
	}
	return s.get(ctx, keyHash, id)
}

// setStatus sets a batch's status (canceling, once its cancel was sent).
func (s *Store) setBatchStatus(ctx context.Context, batchID, status string) error {
	_, err := s.w.ExecContext(ctx, s.q(`UPDATE batches SET status = ? WHERE id = ?`), status, batchID)
	return err
}

// expire deletes what is past retention: ended requests, finished
// batches, delivered or failed webhooks.
func (s *Store) expire(ctx context.Context, before int64) (int64, error) {
	res, err := s.w.ExecContext(ctx, s.q(`DELETE FROM requests WHERE status = 'ended' AND ended_at < ?`), before)
	if err != nil {
		return 0, fmt.Errorf("bulk: expire results: %w", err)
	}
	n, _ := res.RowsAffected()
	if _, err := s.w.ExecContext(ctx, s.q(`DELETE FROM batches WHERE status IN ('ended', 'failed') AND COALESCE(ended_at, created_at) < ?`), before); err != nil {
		return n, fmt.Errorf("bulk: expire batches: %w", err)
	}
	if _, err := s.w.ExecContext(ctx, s.q(`DELETE FROM webhooks WHERE status <> 'pending' AND created_at < ?`), before); err != nil {
		return n, fmt.Errorf("bulk: expire webhooks: %w", err)
	}
	return n, nil
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
