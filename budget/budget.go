package budget

import (
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/spend"
)

// Set is the budgets in force. It is a spend.Sink (tell it the ledger's
// spend: spend.Ledger.Tell) and a dispatch.Budgeter (Refuse). A nil Set
// has no budgets.
type Set struct {
	// idx is the budgets in force, swapped whole by Replace: a request
	// sees the old set or the new one.
	idx atomic.Pointer[index]
	log *slog.Logger
	// replacing orders Replaces.
	replacing sync.Mutex

	refused, warnings *prometheus.CounterVec
	// events are the webhook's queue (Notify); nil without one.
	events chan Event
	// shared: the budgets are refreshed from shared books (Share); stale:
	// the last refresh failed.
	shared, stale atomic.Bool
	// reserving makes each Reserve's look at what is left and its hold
	// one step, so that two requests cannot both take the last of a
	// budget. Only Reserve takes it: the request path never does.
	reserving sync.Mutex
	// books is what a group budget's new member starts from (Load,
	// Share, Replace); nil: from nothing.
	books atomic.Pointer[booksOf]
}

// booksOf holds a Books for an atomic.Pointer.
type booksOf struct{ Books }

// index is one set of budgets, by what they bind.
type index struct {
	// all is every budget in the order configured; a group budget's
	// members are in its members, not here.
	all      []*tracked
	byTenant map[string][]*tracked
	byKey    map[string][]*tracked
	// byGroup is the group budgets by their group, and groups all of
	// them: the ledger's spend is counted against their members.
	byGroup map[string][]*tracked
	groups  []*tracked
}

// each calls f with every budget that counts spend: the tenants' and
// keys', and every group budget's members.
func (x *index) each(f func(*tracked)) {
	for _, t := range x.all {
		if t.members == nil {
			f(t)
			continue
		}
		for _, m := range t.members.list() {
			f(m)
		}
	}
}

// tracked is one budget and its spend in its current period. Its Limit
// and Warn change (Replace) under mu, and are read under it.
type tracked struct {
	Spec
	mu           sync.Mutex
	start, reset time.Time
	spent        float64 // in Unit: this replica's count and others
	// others is the part of spent that other replicas sharing the books
	// spent in this period, as last read (Share).
	others float64
	// warned and crossed say the soft and hard thresholds were passed in
	// this period, so that each is logged once a period.
	warned, crossed bool
	// overshoot is spent past Limit in this period: what requests
	// already past the check when the budget was crossed spent.
	overshoot float64
	// held is what Reservations hold, in Unit: the estimated spend of
	// accepted work whose answers are still to come (bulk requests,
	// Message Batches). It counts as spent until it is released, and is
	// kept across a period's end, since the answers are counted when they
	// come.
	held float64
	// holds is how many Reservations hold part of held: at none, held
	// is 0 exactly, whatever the rounding of the adds and takes.
	holds int
	// members is set on a group budget, which counts nothing itself:
	// each member of its group is bound by a budget of their own, made
	// from its Spec.
	members *members
	// read is closed once a group member's books have been read (or
	// failed); made is when the member was made. Both unset otherwise.
	read chan struct{}
	made time.Time
}

// New is the set of specs (each already Checked); log hears the warnings
// (nil: slog.Default()). It fails on two budgets of one name.
func New(specs []Spec, log *slog.Logger) (*Set, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	return NewLive(specs, log)
}

// NewLive is New, but a Set even with no specs: one whose budgets the
// admin API changes while sluice runs (Replace).
func NewLive(specs []Spec, log *slog.Logger) (*Set, error) {
	if log == nil {
		log = slog.Default()
	}
	s := &Set{log: log,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_budget_refused_total",
			Help: "Requests refused (402) for being past a hard budget, by budget."}, []string{"budget"}),
		warnings: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sluice_budget_warnings_total",
			Help: "Periods in which a budget's soft threshold (warn_at) was passed, by budget."}, []string{"budget"}),
	}
	x, _, err := newIndex(specs, nil)
	if err != nil {
		return nil, err
	}
	s.idx.Store(x)
	return s, nil
}

// newIndex indexes specs, reusing old's tracked budget of a spec's name
// when it binds the same and counts alike (its spend goes on); fresh are
// the ones made new.
func newIndex(specs []Spec, old *index) (x *index, fresh []*tracked, err error) {
	x = &index{byTenant: map[string][]*tracked{}, byKey: map[string][]*tracked{}, byGroup: map[string][]*tracked{}}
	was := map[string]*tracked{}
	if old != nil {
		for _, t := range old.all {
			was[t.Name] = t
		}
	}
	names := map[string]bool{}
	for _, sp := range specs {
		if names[sp.Name] {
			return nil, nil, fmt.Errorf("two budgets are named %q; give each its own name", sp.Name)
		}
		names[sp.Name] = true
		t := was[sp.Name]
		if t != nil && t.Tenant == sp.Tenant && t.Key == sp.Key && t.Group == sp.Group && t.Unit == sp.Unit && t.Period == sp.Period && t.Zone.String() == sp.Zone.String() {
			t.limit(sp.Limit, sp.Warn)
			if t.members != nil { // each member's limit is the group budget's
				for _, m := range t.members.list() {
					m.limit(sp.Limit, sp.Warn)
				}
			}
		} else {
			t = &tracked{Spec: sp}
			if sp.Group != "" {
				t.members = &members{m: map[string]*tracked{}}
			} else {
				fresh = append(fresh, t)
			}
		}
		x.all = append(x.all, t)
		switch {
		case sp.Tenant != "":
			x.byTenant[sp.Tenant] = append(x.byTenant[sp.Tenant], t)
		case sp.Key != "":
			x.byKey[sp.Key] = append(x.byKey[sp.Key], t)
		default:
			x.byGroup[sp.Group] = append(x.byGroup[sp.Group], t)
			x.groups = append(x.groups, t)
		}
	}
	return x, fresh, nil
}

// limit changes t's limit and soft threshold, its spend kept.
func (t *tracked) limit(limit, warn float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Limit, t.Warn = limit, warn
	// Thresholds moved: each is said again once it is passed.
	t.warned = t.Warn > 0 && t.spent >= t.Warn
	t.crossed = t.spent >= t.Limit
	t.overshoot = max(t.spent-t.Limit, 0)
}

// limits is t's limit and soft threshold, which Replace changes.
func (t *tracked) limits() (limit, warn float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.Limit, t.Warn
}

// begin starts t's current period with what b says was spent in it (nil
// b: from nothing); with shared books (Share), the other replicas' part
// is kept apart as Refresh keeps it.
func (s *Set) begin(t *tracked, b Books, now time.Time) error {
	t.mu.Lock()
	t.roll(now)
	from := t.start
	t.mu.Unlock()
	if b == nil {
		return nil
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
		t.mu.Lock()
		t.others = ousd
		if t.Unit == Tokens {
			t.others = float64(otokens)
		}
		t.mu.Unlock()
	}
	s.add(t, spend.Entry{Key: spend.Key{Tenant: t.Tenant, Inbound: t.Key}, USD: usd, Tokens: tokens}, now)
	return nil
}

// remember keeps b for the members of group budgets to start from.
func (s *Set) remember(b Books) {
	if b != nil {
		s.books.Store(&booksOf{b})
	}
}

// KeyOf is r's key as budgets and the spend ledger name it: the sluice
// key's short hash under inbound keys, else the API key's.
func KeyOf(r *request.Descriptor) string {
	if r.Inbound != nil && r.Inbound.Hash != "" {
		return r.Inbound.Hash
	}
	return r.Key
}

// Spent counts e against the budgets of its tenant and its key.
func (s *Set) Spent(e spend.Entry) {
	if s == nil {
		return
	}
	now := time.Now()
	x := s.idx.Load()
	for _, t := range x.byTenant[e.Tenant] {
		s.add(t, e, now)
	}
	for _, t := range x.byKey[e.Inbound] {
		s.add(t, e, now)
	}
	for _, g := range x.groups {
		if t := g.members.get(e.Tenant); t != nil {
			s.add(t, e, now)
		}
	}
}

func (s *Set) add(t *tracked, e spend.Entry, now time.Time) {
	n := e.USD
	if t.Unit == Tokens {
		n = float64(e.Tokens)
	}
	if n == 0 {
		return
	}
	t.mu.Lock()
	t.roll(now)
	s.bump(t, n, now)
}

// bump adds n to t's spend this period and warns of what it crossed.
// Under t.mu, which it releases.
func (s *Set) bump(t *tracked, n float64, now time.Time) {
	was := t.spent
	t.spent += n
	if t.crossed {
		t.overshoot = t.spent - t.Limit
	}
	warn := t.Warn > 0 && !t.warned && t.spent >= t.Warn
	cross := !t.crossed && t.spent >= t.Limit
	t.warned = t.warned || warn
	if cross {
		t.crossed, t.overshoot = true, t.spent-t.Limit
	}
	spent, reset, limit, warnAt := t.spent, t.reset, t.Limit, t.Warn
	t.mu.Unlock()
	if warn || cross {
		e := Event{Type: "budget_warning", Budget: t.Name, Tenant: t.Tenant, Key: t.Key, Group: t.Group, Unit: t.Unit.String(), Spent: spent, WarnAt: warnAt,
			Limit: limit, ResetAt: reset, At: now}
		if cross {
			e.Type = "budget_exceeded"
		}
		s.event(e)
	}
	if warn {
		s.warnings.WithLabelValues(t.Name).Inc()
		s.log.Warn("budget: past its soft threshold (warn_at); requests go on", "budget", t.Name,
			"spent", t.amount(spent), "warn_at", t.amount(warnAt), "limit", t.amount(limit), "resets", reset.Format(time.RFC3339))
	}
	if cross {
		s.log.Warn("budget: past its limit; its requests are refused (402) until it resets", "budget", t.Name,
			"spent", t.amount(spent), "before", t.amount(was), "limit", t.amount(limit), "resets", reset.Format(time.RFC3339))
	}
}

// roll starts a new period if now is past the current one's end. Under
// t.mu.
func (t *tracked) roll(now time.Time) {
	if now.Before(t.reset) {
		return
	}
	t.start = t.Start(now)
	t.reset = t.Reset(t.start)
	t.spent, t.others, t.overshoot, t.warned, t.crossed = 0, 0, 0, false, false
}

// Refuse is the error for a request of r's tenant or key when one of
// their budgets is spent, or, for a person signed in through the
// identity provider, their own budget of one of their groups' budgets: a
// 402 billing_error that says which budget, what was spent of what limit
// and when it resets; nil when none is.
func (s *Set) Refuse(r *request.Descriptor) error {
	if s == nil || r == nil {
		return nil
	}
	if e := s.Over(r.Tenant, KeyOf(r)); e != nil {
		return e
	}
	if e := s.OverMember(MemberOf(r)); e != nil {
		return e
	}
	return nil
}

// Over is Refuse for a tenant and a key by name: the bulk endpoint's
// check, which has no descriptor.
func (s *Set) Over(tenant, key string) *apierror.Error {
	if s == nil {
		return nil
	}
	now := time.Now()
	x := s.idx.Load()
	for _, t := range x.byTenant[tenant] {
		if e := s.over(t, now); e != nil {
			return e
		}
	}
	for _, t := range x.byKey[key] {
		if e := s.over(t, now); e != nil {
			return e
		}
	}
	return nil
}

func (s *Set) over(t *tracked, now time.Time) *apierror.Error {
	t.mu.Lock()
	t.roll(now)
	spent, held, reset, limit, over := t.spent, t.held, t.reset, t.Limit, t.spent+t.held >= t.Limit
	t.mu.Unlock()
	if !over {
		return nil
	}
	s.refused.WithLabelValues(t.Name).Inc()
	heldNote := ""
	if held > 0 {
		heldNote = fmt.Sprintf(", and %s more is held for bulk requests and batches in progress", t.amount(held))
	}
	return &apierror.Error{Status: http.StatusPaymentRequired, Type: "billing_error", NoRetry: true,
		Message: fmt.Sprintf("sluice budget %q (%s) is spent: %s of its %s limit this %s%s; it resets at %s (in %s). Retrying before then is refused the same way; ask sluice's operator to raise the budget",
			t.Name, t.binds(), t.amount(spent), t.amount(limit), t.Period, heldNote, reset.Format(time.RFC3339), reset.Sub(now).Round(time.Second))}
}

// binds says what the budget binds, for a message.
func (t *tracked) binds() string {
	switch {
	case t.Group != "" && t.Tenant != "":
		return "each member of group " + strconv.Quote(t.Group) + " on their own; this one is " + strconv.Quote(t.Tenant)
	case t.Group != "":
		return "each member of group " + strconv.Quote(t.Group) + " on their own"
	case t.Tenant != "":
		return "tenant " + strconv.Quote(t.Tenant)
	}
	return "key " + t.Key
}

// amount is n in the budget's unit, as people write it.
func (t *tracked) amount(n float64) string {
	if t.Unit == Tokens {
		return strconv.FormatFloat(math.Round(n), 'f', 0, 64) + " tokens"
	}
	return "$" + strconv.FormatFloat(n, 'f', 2, 64)
}
