package bulk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/apierror"
)

// createBatch claims a job's requests and creates their upstream batch.
// The batch id is stored as soon as the create returns. A create whose
// answer is lost (the connection broke, a 5xx that may have come after
// the batch was made) is never sent again blindly: it is reconciled.
func (s *Service) createBatch(ctx context.Context, j job) error {
	batchID := newID("bulkbatch_")
	s.mu.Lock()
	s.creating[batchID] = true // the poller leaves it alone while this runs
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.creating, batchID)
		s.mu.Unlock()
	}()
	claimedAt := time.Now()
	ids, err := s.store.claim(ctx, batchID, j.keyHash, j.ids, s.owner, time.Now().Add(s.lease).UnixMilli())
	if err != nil || len(ids) == 0 {
		return err // none left queued: another replica, or a cancel, took them
	}
	cred, err := s.credentialOf(ctx, j.keyHash)
	if err != nil {
		defer s.ended(ids...)
		return s.store.fail(ctx, batchID, erroredResult("api_error", "sluice could not read the submitter's stored key: "+err.Error()))
	}
	b, err := s.api.create(ctx, cred, func(w io.Writer) error { return s.writeBatch(ctx, w, batchID) })
	var se *apiStatusError
	switch {
	case err == nil:
		if err := s.store.created(context.WithoutCancel(ctx), batchID, b.ID); err != nil {
			return fmt.Errorf("record batch %s: %w", b.ID, err)
		}
		s.m.batches.Inc()
		return nil
	case errors.As(err, &se) && (se.status == http.StatusTooManyRequests || se.status == 529):
		// Refused before anything was made: back to the queue, where the
		// sweep picks them up again.
		s.m.createRefused.Inc()
		return s.store.requeue(ctx, batchID)
	case errors.As(err, &se) && se.status >= 400 && se.status < 500:
		// The batch as a whole was refused for good (a bad key, too
		// large): every request ends with that error.
		s.m.createRefused.Inc()
		defer s.ended(ids...)
		return s.store.fail(ctx, batchID, erroredFrom(se))
	case ctx.Err() != nil:
		return nil // shutting down: the next start reconciles it
	}
	s.log.Warn("bulk: a batch create got no clear answer; reconciling it by listing the key's batches", "batch", batchID, "err", err)
	s.m.createLost.Inc()
	return s.reconcile(ctx, batchRow{id: batchID, keyHash: j.keyHash, status: batchCreating, count: len(ids), createdAt: claimedAt.UnixMilli()})
}

// writeBatch writes the create body of batchID: each request's stored
// body as params, its id as custom_id.
func (s *Service) writeBatch(ctx context.Context, w io.Writer, batchID string) error {
	if _, err := io.WriteString(w, `{"requests":[`); err != nil {
		return err
	}
	first := true
	err := s.store.bodies(ctx, batchID, func(id string, body []byte) error {
		sep := `,{"custom_id":"`
		if first {
			sep, first = `{"custom_id":"`, false
		}
		if _, err := io.WriteString(w, sep+id+`","params":`); err != nil {
			return err
		}
		if _, err := w.Write(body); err != nil {
			return err
		}
		_, err := io.WriteString(w, "}")
		return err
	})
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, "]}")
	return err
}

func (s *Service) credentialOf(ctx context.Context, keyHash string) (credential, error) {
	sealed, err := s.store.credential(ctx, keyHash)
	if err != nil {
		return credential{}, err
	}
	if sealed == nil {
		return credential{}, errors.New("no stored key")
	}
	plain, err := s.seal.open(sealed, keyHash)
	if err != nil {
		return credential{}, err
	}
	return parseCredential(plain)
}

// erroredResult is a Batches result line's errored result.
func erroredResult(typ, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "errored", "error": apierror.Envelope(typ, msg, "")})
	return b
}

// erroredFrom makes the upstream's refusal of a whole batch each of its
// requests' errored result.
func erroredFrom(se *apiStatusError) []byte {
	if b, ok := apierror.Decode(se.body); ok {
		return erroredResult(b.Error.Type, b.Error.Message)
	}
	return erroredResult("api_error", fmt.Sprintf("the upstream refused the batch with status %d", se.status))
}

// clockSkew is how far the upstream's clock may be from ours when a lost
// create's batch is looked for by its creation time.
const clockSkew = 5 * time.Minute

// reconcile finds the upstream batch of a create whose answer was lost:
// among the key's batches created since the attempt (less clock skew),
// one with the same number of requests that no other batch of ours has
// adopted. One such batch still in progress is adopted (its results are
// matched to requests by custom_id); of several, only one whose results
// carry our custom_ids. Found nowhere twice, its requests go back to the
// queue: they never reached the upstream.
func (s *Service) reconcile(ctx context.Context, b batchRow) error {
	cred, err := s.credentialOf(ctx, b.keyHash)
	if err != nil {
		return err
	}
	since := time.UnixMilli(b.createdAt).Add(-clockSkew)
	var candidates []upstreamBatch
	after := ""
	for {
		page, more, err := s.api.list(ctx, cred, after)
		if err != nil {
			return fmt.Errorf("list batches to reconcile %s: %w", b.id, err)
		}
		old := false
		for _, u := range page {
			if u.CreatedAt.Before(since) {
				old = true
				break
			}
			if u.RequestCounts.total() != b.count {
				continue
			}
			known, err := s.store.knownUpstream(ctx, u.ID)
			if err != nil {
				return err
			}
			if !known {
				candidates = append(candidates, u)
			}
		}
		if old || !more || len(page) == 0 {
			break
		}
		after = page[len(page)-1].ID
	}
	var pick string
	if len(candidates) == 1 {
		pick = candidates[0].ID
	} else if len(candidates) > 1 {
		ours, err := s.store.openIDs(ctx, b.id)
		if err != nil {
			return err
		}
		for _, c := range candidates {
			if c.ProcessingStatus != "ended" {
				continue
			}
			match := false
			stop := errors.New("stop")
			err := s.api.results(ctx, cred, c.ID, func(l resultLine) error {
				match = ours[l.CustomID]
				return stop
			})
			if err != nil && !errors.Is(err, stop) {
				return err
			}
			if match {
				pick = c.ID
				break
			}
		}
		if pick == "" {
			return nil // several unverifiable: wait until one has ended
		}
	}
	if pick != "" {
		s.log.Info("bulk: reconciled a lost create with the upstream batch carrying its requests", "batch", b.id, "upstream_batch", pick)
		s.m.reconciled.WithLabelValues("adopted").Inc()
		return s.store.created(ctx, b.id, pick)
	}
	if err := s.store.missed(ctx, b.id); err != nil {
		return err
	}
	if b.misses+1 >= 2 && time.Since(time.UnixMilli(b.createdAt)) > 2*s.lease {
		s.log.Info("bulk: a lost create's batch is not upstream; its requests go back to the queue", "batch", b.id)
		s.m.reconciled.WithLabelValues("requeued").Inc()
		return s.store.requeue(ctx, b.id)
	}
	return nil
}
