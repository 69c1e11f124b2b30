package dispatch

import "github.com/sluicehq/sluice/request"

// Budgeter says whether a request's tenant or key has spent its budget
// (package budget's Set is one).
type Budgeter interface {
	// Refuse is the error a request past a hard budget is answered with
	// (an *apierror.Error, passed to the client as it is), or nil. It
	// must be quick: it is called on every request.
	Refuse(r *request.Descriptor) error
}

// Budget is the admission that refuses a request whose tenant or key has
// spent its budget: before it waits, and again when it is released to its
// call (and to each retry's), so that what the budget lets through once it
// is spent is the calls already under way, not the whole queue. It holds
// nothing and learns nothing: spend is counted from answers by the spend
// ledger, which tells the budgets.
type Budget struct {
	Open
	Budgets Budgeter
}

var (
	_ Admission = Budget{}
	_ Recheck   = Budget{}
)

// Admit refuses r when its budget is spent. Before the read (r nil)
// nothing is known of whose request it is: admitted.
func (b Budget) Admit(r *request.Descriptor, _ Load) error {
	if r == nil {
		return nil
	}
	return b.Budgets.Refuse(r)
}

// Recheck is the same check as Admit, at the request's release: a budget
// spent while it waited refuses it with the same answer.
func (b Budget) Recheck(r *request.Descriptor) error { return b.Budgets.Refuse(r) }
