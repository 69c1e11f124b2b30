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
