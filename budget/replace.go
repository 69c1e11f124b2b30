package budget

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/spend"
)

// Replace puts specs in force in place of the Set's budgets, at once for
// every request after it. A budget of the same name that binds the same
// tenant or key in the same unit, period and zone keeps its spend, its
// holds and its period: only its limit and soft threshold change. One
// that is new (or binds anew) starts from what b says was spent in its
// current period (nil b: from nothing), as Load starts a budget at start;
// with shared books (Share), b's Others part is kept apart as Refresh
// keeps it. A budget left out is dropped, and its holds with it.
func (s *Set) Replace(specs []Spec, b Books) error {
	if s == nil {
		return fmt.Errorf("budget: Replace on no Set: make it with NewLive")
	}
	s.replacing.Lock()
	defer s.replacing.Unlock()
	x, fresh, err := newIndex(specs, s.idx.Load())
	if err != nil {
		return err
	}
	now := time.Now()
	for _, t := range fresh {
		t.mu.Lock()
		t.roll(now)
		from := t.start
		t.mu.Unlock()
		if b == nil {
			continue
		}
		usd, tokens, err := b.Since(from, t.Tenant, t.Key)
		if err != nil {
			return fmt.Errorf("budget %q: load its spend: %w", t.Name, err)
		}
		if sh, ok := b.(Shared); ok && s.shared.Load() {
			ousd, otokens, err := sh.Others(from, t.Tenant, t.Key)
			if err != nil {
				return fmt.Errorf("budget %q: load the other replicas' spend: %w", t.Name, err)
			}
			t.others = ousd
			if t.Unit == Tokens {
				t.others = float64(otokens)
			}
		}
		s.add(t, spend.Entry{Key: spend.Key{Tenant: t.Tenant, Inbound: t.Key}, USD: usd, Tokens: tokens}, now)
	}
	s.idx.Store(x)
	return nil
}
