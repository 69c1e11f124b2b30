package budget

import (
	"sync/atomic"
	"time"
)

// RefreshEvery is how often a replica whose books are shared reads what
// the other replicas spent: with their writes once a second
// (spendstore.FlushEvery), another replica's answer weighs on this
// replica's budgets at most about two seconds after it was counted.
const RefreshEvery = time.Second

// Shared is books several replicas write: Others sums what the other
// replicas spent from from on, for tenant (or, if tenant is "", key), as
// far as they have written it.
type Shared interface {
	Others(from time.Time, tenant, key string) (usd float64, tokens int64, err error)
}

// Refresh reads what the other replicas spent in each budget's period and
// takes it into the budget in place of the last read, so that a budget
// binds a tenant across replicas. A budget whose read fails keeps the
// last; the first error is returned.
func (s *Set) Refresh(b Shared) error {
	if s == nil {
		return nil
	}
	var first error
	s.idx.Load().each(func(t *tracked) {
		now := time.Now()
		t.mu.Lock()
		t.roll(now)
		from := t.start
		t.mu.Unlock()
		usd, tokens, err := b.Others(from, t.Tenant, t.Key)
		if err != nil {
			if first == nil {
				first = err
			}
			return
		}
		n := usd
		if t.Unit == Tokens {
			n = float64(tokens)
		}
		t.mu.Lock()
		t.roll(time.Now())
		if !t.start.Equal(from) { // a new period began meanwhile: read again next time
			t.mu.Unlock()
			return
		}
		d := n - t.others
		t.others = n
		s.bump(t, d, now)
	})
	if first == nil {
		s.stale.Store(false)
	} else {
		s.stale.Store(true)
	}
	return first
}

// Share refreshes the budgets from b now and every RefreshEvery until
// the returned stop is called. Requests never wait for it: a budget is
// checked against what this replica counted and the last read, and while
// reads fail (FromMemory) against what they last said.
func (s *Set) Share(b Shared) (stop func()) {
	if s == nil {
		return func() {}
	}
	s.shared.Store(true)
	if bs, ok := b.(Books); ok { // a group budget's new member starts from them
		s.remember(bs)
	}
	s.Refresh(b) // the store says when it fails
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(RefreshEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				s.Refresh(b)
			}
		}
	}()
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			close(quit)
			<-done
		}
	}
}

// Shared says the budgets are refreshed from books other replicas
// write; FromMemory that the last read of them failed, so that the
// budgets hold from this replica's count and what the last good read said.
func (s *Set) Shared() bool     { return s != nil && s.shared.Load() }
func (s *Set) FromMemory() bool { return s != nil && s.stale.Load() }
