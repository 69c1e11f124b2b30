package budget

import (
	"fmt"
	"time"
)

// Replace puts specs in force in place of the Set's budgets, at once for
// every request after it. A budget of the same name that binds the same
// tenant or key in the same unit, period and zone keeps its spend, its
// holds and its period: only its limit and soft threshold change. One
// that is new (or binds anew) starts from what b says was spent in its
// current period (nil b: from nothing), as Load starts a budget at start;
// with shared books (Share), b's Others part is kept apart as Refresh
// keeps it. A budget left out is dropped, and its holds with it. A group
// budget that stays keeps its members' spend; a new one's members start
// from b as each makes their first request.
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
		if err := s.begin(t, b, now); err != nil {
			return err
		}
	}
	s.remember(b)
	s.idx.Store(x)
	return nil
}
