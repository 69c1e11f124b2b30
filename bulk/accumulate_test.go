package bulk

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/window"
)

// newAccumulator is a Service with only its windows: what accumulate and
// flushed need, no store and no goroutines.
func newAccumulator(maxWait time.Duration, maxRequests int, maxBytes int64) *Service {
	s := &Service{cfg: Config{MaxWait: maxWait, MaxRequests: maxRequests, MaxBytes: maxBytes},
		windows: map[string]*window.Window[string]{}, inWindow: map[string]bool{}, sizes: map[string]int64{},
		kick: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.m = newMetrics(s)
	return s
}

func (s *Service) takeJobs() []job {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs
	s.jobs = nil
	return j
}

func TestAccumulateOnCountBytesAndAgePerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newAccumulator(5*time.Minute, 3, 1000)
		defer s.cancel()
		add := func(key, id string, n int64) { s.accumulate(queuedRef{id: id, keyHash: key, bytes: n}) }

		// Count: the third request of key a closes its window; key b's
		// requests, interleaved, are never in a's batch.
		add("a", "a1", 10)
		add("b", "b1", 10)
		add("a", "a2", 10)
		add("a", "a3", 10)
		jobs := s.takeJobs()
		if len(jobs) != 1 || jobs[0].keyHash != "a" || !slices.Equal(jobs[0].ids, []string{"a1", "a2", "a3"}) {
			t.Fatalf("after a's third request: jobs %v; want one batch a1 a2 a3 of key a", jobs)
		}

		// Bytes: b2 (900) would take b's window past 1000 bytes (with each item's
		// batch JSON): b1 goes alone, b2 opens the next.
		add("b", "b2", 900)
		jobs = s.takeJobs()
		if len(jobs) != 1 || jobs[0].keyHash != "b" || !slices.Equal(jobs[0].ids, []string{"b1"}) {
			t.Fatalf("on bytes: jobs %v; want b1 alone", jobs)
		}

		// Age: BULK_MAX_WAIT_S after its first request, b2's window
		// closes, not a moment before.
		time.Sleep(5*time.Minute - time.Second)
		synctest.Wait()
		if jobs := s.takeJobs(); len(jobs) != 0 {
			t.Fatalf("before max wait: jobs %v", jobs)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		jobs = s.takeJobs()
		if len(jobs) != 1 || !slices.Equal(jobs[0].ids, []string{"b2"}) {
			t.Fatalf("at max wait: jobs %v; want b2", jobs)
		}

		// A request already in a window is not added twice (the sweep
		// finds it queued), and a withdrawn one never reaches a batch.
		add("c", "c1", 1)
		add("c", "c1", 1)
		add("c", "c2", 1)
		s.withdraw("c", "c2")
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		jobs = s.takeJobs()
		if len(jobs) != 1 || !slices.Equal(jobs[0].ids, []string{"c1"}) {
			t.Fatalf("dedup and withdraw: jobs %v; want c1 once", jobs)
		}
	})
}
