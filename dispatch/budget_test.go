package dispatch

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
)

// spendingBudget is a Budgeter whose budget is spent once spent is set:
// an answer counted meanwhile crossed it.
type spendingBudget struct{ spent atomic.Bool }

var errBudgetSpent = errors.New("the budget is spent")

func (b *spendingBudget) Refuse(*request.Descriptor) error {
	if b.spent.Load() {
		return errBudgetSpent
	}
	return nil
}

// Issue 37: a budget crossed while requests wait for a slot refuses them
// when they are released, not only when they arrive. Three requests of a
// tenant are admitted together behind one slot; the first one's answer
// spends the budget: the two behind it are answered with the budget's
// refusal as their slot comes, their calls never made, and the gate hears
// nothing of the upstream from them (EndUnknown, not an overload).
func TestBudgetCheckedAgainAtRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &spendingBudget{}
		r := newRig(t, Config{MaxSize: 3, MaxWait: time.Second, Timeout: time.Minute, Admission: Chain{QueueBound{Max: 10}, Budget{Budgets: b}}}, 1)
		var calls atomic.Int64
		call := func(ctx context.Context, m *Member) error {
			calls.Add(1)
			b.spent.Store(true) // this answer is the one that crosses it
			return sleepFor(time.Second)(ctx, m)
		}
		first := r.arrive(t.Context(), call)
		second := r.arrive(t.Context(), call)
		third := r.admit(t, t.Context(), call) // a parked one (Start) too
		wantOutcome(t, "first", first, nil, time.Second)
		wantOutcome(t, "second", second, errBudgetSpent, time.Second)
		wantEnded(t, "third", third, errBudgetSpent, time.Second)
		if n := calls.Load(); n != 1 {
			t.Errorf("%d calls made; want 1: the budget was spent before the others were released", n)
		}
		if got, want := r.gate.ended(), []gate.Ending{gate.EndOK, gate.EndUnknown, gate.EndUnknown}; !slices.Equal(got, want) {
			t.Errorf("the gate heard %v; want %v", got, want)
		}
		wantGate(t, r.gate, 0, 0)
	})
}

// A retry is released anew, and checked anew: a request whose first
// attempt failed while another's answer spent the budget is refused when
// its retry's slot comes, instead of being sent again.
func TestBudgetCheckedAgainAtRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &spendingBudget{}
		r := newRig(t, Config{MaxSize: 1, Timeout: time.Minute, Admission: Budget{Budgets: b}}, 1)
		var attempts atomic.Int64
		out := r.arrive(t.Context(), func(ctx context.Context, m *Member) error {
			for {
				attempts.Add(1)
				m.Settle(529, nil)
				b.spent.Store(true) // meanwhile another answer spent it
				if err := m.Requeue(ctx, time.Second); err != nil {
					return err
				}
			}
		})
		wantOutcome(t, "retried", out, errBudgetSpent, time.Second)
		if n := attempts.Load(); n != 1 {
			t.Errorf("%d attempts; want 1: the retry must be refused at its release", n)
		}
		if got, want := r.gate.ended(), []gate.Ending{gate.EndOverloaded, gate.EndUnknown}; !slices.Equal(got, want) {
			t.Errorf("the gate heard %v; want %v", got, want)
		}
		wantGate(t, r.gate, 0, 0)
	})
}
