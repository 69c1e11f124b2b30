package bulk

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/window"
)

// maxGroup bounds one group commit.
const maxGroup = 2000

// writer is the group-commit writer: it stores whatever submissions are
// waiting in one transaction, answers each after the commit, and then puts
// the new ones in their windows.
func (s *Service) writer() {
	defer s.wg.Done()
	var group []*write
	var reqs []*newRequest
	for {
		group, reqs = group[:0], reqs[:0]
		select {
		case <-s.ctx.Done():
			s.refuseWaiting()
			return
		case w := <-s.writes:
			group = append(group, w)
		}
	more:
		for len(group) < maxGroup {
			select {
			case w := <-s.writes:
				group = append(group, w)
			default:
				break more
			}
		}
		for _, w := range group {
			reqs = append(reqs, w.req)
		}
		start := time.Now()
		err := s.store.insert(s.ctx, reqs, s.cfg.MaxPendingBytes)
		s.m.commit.Observe(time.Since(start).Seconds())
		s.m.groupSize.Observe(float64(len(group)))
		for _, w := range group {
			w.done <- err
		}
		if err != nil {
			s.log.Error("bulk: storing submissions failed", "err", err, "n", len(group))
			continue
		}
		for _, r := range reqs {
			if r.existing == nil && r.err == nil {
				s.accumulate(queuedRef{id: r.ID, keyHash: r.KeyHash, bytes: int64(len(r.body)), createdAt: r.CreatedAt})
			}
		}
	}
}

// refuseWaiting answers the submissions still waiting when the service
// stops; none of them was stored.
func (s *Service) refuseWaiting() {
	for {
		select {
		case w := <-s.writes:
			w.done <- errStopping
		default:
			return
		}
	}
}

var errStopping = errors.New("bulk: shutting down")

// submit stores r durably and returns once it is committed.
func (s *Service) submit(ctx context.Context, r *newRequest) error {
	w := &write{req: r, done: make(chan error, 1)}
	select {
	case s.writes <- w:
	case <-s.ctx.Done():
		return errStopping
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once handed over, the answer comes whatever the client does: the
	// submission may already be committed.
	return <-w.done
}

// accumulate puts a queued request in its credential's window.
func (s *Service) accumulate(q queuedRef) {
	s.mu.Lock()
	if s.inWindow[q.id] || s.ctx.Err() != nil {
		s.mu.Unlock()
		return
	}
	w := s.windows[q.keyHash]
	if w == nil {
		key := q.keyHash
		w, _ = window.New(s.cfg.MaxRequests, s.cfg.MaxWait, func(wave *window.Wave[string]) { s.flushed(key, wave) })
		// Each item is counted with the batch JSON around it.
		w.SetMaxBytes(s.cfg.MaxBytes)
		s.windows[key] = w
	}
	s.inWindow[q.id] = true
	s.sizes[q.id] = q.bytes
	s.mu.Unlock()
	w.AddSized(q.id, q.bytes+itemOverhead)
}

// itemOverhead is the batch JSON around one request's params.
const itemOverhead = 64

// withdraw takes id out of its window, if it is in one here.
func (s *Service) withdraw(keyHash, id string) {
	s.mu.Lock()
	w := s.windows[keyHash]
	s.mu.Unlock()
	if w != nil && w.Withdraw(id) {
		s.mu.Lock()
		delete(s.inWindow, id)
		delete(s.sizes, id)
		s.mu.Unlock()
	}
}

// flushed is each window's flush: the wave becomes a job for the
// submitter. It runs on an Add or a timer and must not block.
func (s *Service) flushed(keyHash string, wave *window.Wave[string]) {
	s.m.flushes.WithLabelValues(wave.Reason.String()).Inc()
	s.mu.Lock()
	for _, id := range wave.Items {
		delete(s.inWindow, id)
		delete(s.sizes, id)
	}
	if s.ctx.Err() == nil {
		s.jobs = append(s.jobs, job{keyHash: keyHash, ids: wave.Items})
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// submitter turns flushed waves into upstream batches, one at a time.
func (s *Service) submitter() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		var j job
		have := len(s.jobs) > 0
		if have {
			j = s.jobs[0]
			s.jobs[0] = job{}
			s.jobs = s.jobs[1:]
		}
		s.mu.Unlock()
		if !have {
			select {
			case <-s.ctx.Done():
				return
			case <-s.kick:
			}
			continue
		}
		if err := s.createBatch(s.ctx, j); err != nil && s.ctx.Err() == nil {
			s.log.Error("bulk: submitting a batch failed; its requests stay queued and are retried", "err", err, "requests", len(j.ids))
		}
	}
}
