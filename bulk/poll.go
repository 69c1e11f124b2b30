package bulk

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sluicehq/sluice/price"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/spend"
)

// poller watches the batches this replica holds the lease of: it polls
// those in progress and stores their results, reconciles lost creates,
// puts orphaned queued requests back in windows, and expires what is past
// retention.
func (s *Service) poller() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for round := 0; ; round++ {
		s.pollOnce(s.ctx, round)
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Service) pollOnce(ctx context.Context, round int) {
	rows, err := s.store.leaseBatches(ctx, s.owner, time.Now().Add(s.lease).UnixMilli())
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("bulk: leasing batches failed", "err", err)
		}
		return
	}
	inFlight := 0
	for _, b := range rows {
		if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		local := s.creating[b.id]
		s.mu.Unlock()
		if local {
			inFlight++
			continue
		}
		var err error
		if b.status == batchCreating {
			err = s.reconcile(ctx, b)
		} else {
			inFlight++
			err = s.poll(ctx, b)
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("bulk: watching a batch failed; trying again at the next poll", "batch", b.id, "upstream_batch", b.upstreamID, "err", err)
		}
	}
	s.mu.Lock()
	s.inFlight = inFlight
	s.mu.Unlock()
	if err := s.sweep(ctx); err != nil && ctx.Err() == nil {
		s.log.Error("bulk: sweeping the queue failed", "err", err)
	}
	if round%10 == 0 {
		if n, err := s.store.expire(ctx, time.Now().Add(-s.cfg.Retention).UnixMilli()); err != nil && ctx.Err() == nil {
			s.log.Error("bulk: expiring old results failed", "err", err)
		} else if n > 0 {
			s.log.Info("bulk: expired results past BULK_RETENTION", "requests", n)
		}
	}
	if _, err := s.store.dropCredentials(ctx); err != nil && ctx.Err() == nil {
		s.log.Error("bulk: dropping unused credentials failed", "err", err)
	}
}

// sweep puts queued requests that are in no window here into one. The
// first sweep (at start) takes all of them: a previous run's. Later ones
// take those older than the wait and a lease: their replica died, or its
// create was refused and they went back to the queue. A window holding
// requests already past their wait is flushed at once.
func (s *Service) sweep(ctx context.Context) error {
	now := time.Now()
	before := now.Add(-s.cfg.MaxWait - s.lease).UnixMilli()
	s.mu.Lock()
	if s.first {
		before = now.Add(time.Hour).UnixMilli()
		s.first = false
	}
	s.mu.Unlock()
	qs, err := s.store.queued(ctx, before)
	if err != nil {
		return err
	}
	late := map[string]bool{}
	for _, q := range qs {
		s.accumulate(q)
		if now.Sub(time.UnixMilli(q.createdAt)) >= s.cfg.MaxWait {
			late[q.keyHash] = true
		}
	}
	for key := range late {
		s.mu.Lock()
		w := s.windows[key]
		s.mu.Unlock()
		if w != nil {
			w.Flush()
		}
	}
	return nil
}

// poll reads one upstream batch; once it has ended, stores its results.
func (s *Service) poll(ctx context.Context, b batchRow) error {
	cred, err := s.credentialOf(ctx, b.keyHash)
	if err != nil {
		return err
	}
	u, err := s.api.get(ctx, cred, b.upstreamID)
	if err != nil {
		return err
	}
	if u.ProcessingStatus != "ended" {
		status := b.status
		if status == batchInProgress {
			all, err := s.store.allCanceled(ctx, b.id)
			if err != nil {
				return err
			}
			if all {
				if err := s.api.cancel(ctx, cred, b.upstreamID); err != nil {
					return err
				}
				status = batchCanceling
			}
		}
		return s.store.progress(ctx, b.id, status, u.RequestCounts)
	}
	var rows []resultRow
	flush := func() error {
		if len(rows) == 0 {
			return nil
		}
		if err := s.store.storeResults(ctx, rows); err != nil {
			return err
		}
		for _, r := range rows {
			s.ended(r.id)
		}
		rows = rows[:0]
		return nil
	}
	err = s.api.results(ctx, cred, b.upstreamID, func(l resultLine) error {
		s.countResult(b.keyHash, l.Result)
		rows = append(rows, resultRow{id: l.CustomID, result: l.Result})
		if len(rows) >= 1000 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return err
	}
	requeued, err := s.store.endBatch(ctx, b.id, u.RequestCounts)
	if err != nil {
		return err
	}
	if requeued > 0 {
		s.log.Warn("bulk: an adopted batch's results did not name some of its requests; they go back to the queue", "batch", b.id, "requests", requeued)
	}
	return nil
}

// countResult counts a result of keyHash's batch by type, and a succeeded
// one's spend at the batch price (under the tenant bulk, its key by the
// first 16 hex digits of keyHash) and what it saved against realtime
// prices: as much again, the batch price being half.
func (s *Service) countResult(keyHash string, raw json.RawMessage) {
	var r struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return
	}
	s.m.results.WithLabelValues(r.Type).Inc()
	if r.Type != "succeeded" {
		return
	}
	model, u, ok := request.ParseAnswer(r.Message)
	if !ok {
		return
	}
	c := s.cfg.Spend.Add(spend.Key{Tenant: SpendTenant, Inbound: keyHash[:min(len(keyHash), 16)], Model: model},
		price.UsageOf(u.Input, u.Output, u.CacheWrite, u.CacheWrite1h, u.CacheRead), true, false)
	s.m.savings.Add(c.Total() * (1/price.BatchFactor - 1))
}

// SpendTenant is the tenant the spend of bulk results is counted under:
// a bulk request has a key but no tenant.
const SpendTenant = "bulk"
