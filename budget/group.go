package budget

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/apierror"
	"github.com/sluicehq/sluice/request"
)

// A budget per identity-provider group: each member of the group gets it
// on their own, tracked as a budget of their tenant.

// members are a group budget's members seen so far, each a budget of
// their own tenant, made on their first request (member).
type members struct {
	mu sync.RWMutex
	m  map[string]*tracked // by tenant
}

func (ms *members) get(tenant string) *tracked {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	return ms.m[tenant]
}

// list is the members, for a look at each outside the lock.
func (ms *members) list() []*tracked {
	ms.mu.RLock()
	defer ms.mu.RUnlock()
	out := make([]*tracked, 0, len(ms.m))
	for _, t := range ms.m {
		out = append(out, t)
	}
	return out
}

// member is tenant's own budget of the group budget g, made on its first
// request from what the books say tenant spent in its period (the one
// read of the books on the request path, once a member and replica), so
// that a member's budget holds across a restart and binds across
// replicas as a tenant's does.
//
// A member is in the map from its first request, its books read in the
// background: each new member's first requests wait for their own read
// (at most MemberReadWait from when it began), never for another
// member's, so a slow store costs each newcomer a second, not a second
// for every newcomer ahead of them.
func (s *Set) member(g *tracked, tenant string) *tracked {
	t := g.members.get(tenant)
	if t == nil {
		t = s.makeMember(g, tenant)
	}
	select {
	case <-t.read:
		return t
	default:
	}
	wait := time.NewTimer(time.Until(t.made.Add(MemberReadWait)))
	defer wait.Stop()
	select {
	case <-t.read:
	case <-wait.C:
	}
	return t
}

// makeMember puts tenant's budget of g in g's members, unless another
// request just did, and starts reading its books.
func (s *Set) makeMember(g *tracked, tenant string) *tracked {
	g.members.mu.Lock()
	if t := g.members.m[tenant]; t != nil {
		g.members.mu.Unlock()
		return t
	}
	sp := g.Spec
	sp.Name, sp.Tenant = memberName(g.Name, tenant), tenant
	t := &tracked{Spec: sp, read: make(chan struct{}), made: time.Now()}
	t.Limit, t.Warn = g.limits()
	g.members.m[tenant] = t
	g.members.mu.Unlock()
	var b Books
	if bo := s.books.Load(); bo != nil {
		b = bo.Books
	}
	// A store slow to answer holds the member's requests no longer than
	// MemberReadWait: counted from now, and what the books say is added
	// when they answer.
	slow := time.AfterFunc(MemberReadWait, func() {
		s.log.Warn("budget: a group member's spend this period is slow to read; counted from now, and from the books when they answer", "budget", t.Name)
	})
	go func() {
		defer close(t.read)
		defer slow.Stop()
		if err := s.begin(t, b, t.made); err != nil {
			// Counted from now on, and from the other replicas at the
			// next refresh: a store down must not refuse the member.
			s.log.Warn("budget: a group member's spend this period could not be read; counted from now", "budget", t.Name, "err", err)
		}
	}()
	return t
}

// MemberReadWait is the longest a group member's first request waits for
// the books to say what the member spent in the period.
const MemberReadWait = time.Second

// memberName is what tenant's budget of the group budget named name is
// called: in a refusal, the log, the metrics and the admin API.
func memberName(name, tenant string) string { return name + "/" + tenant }

// Member is a person signed in through the identity provider as group
// budgets see them: their tenant, whose spend their budget of each of
// their groups' budgets counts, and their groups. The zero Member (a
// sluice key's request, which has no groups) is bound by no group budget.
type Member struct {
	Tenant string
	Groups []string
}

// MemberOf is r's caller as group budgets see them.
func MemberOf(r *request.Descriptor) Member {
	if r.Inbound == nil || r.Inbound.Groups == nil {
		return Member{}
	}
	return Member{Tenant: r.Tenant, Groups: r.Inbound.Groups}
}

type memberKey struct{}

// WithMember is ctx carrying m: the bulk endpoint, which has no
// descriptor, learns its submitter's groups from it.
func WithMember(ctx context.Context, m Member) context.Context {
	return context.WithValue(ctx, memberKey{}, m)
}

// MemberFrom is ctx's Member (WithMember); the zero Member if none.
func MemberFrom(ctx context.Context) Member {
	m, _ := ctx.Value(memberKey{}).(Member)
	return m
}

// ofMember is m's own budgets of the group budgets of m's groups, each
// made on its first look.
func (s *Set) ofMember(x *index, m Member) []*tracked {
	if m.Tenant == "" || len(x.groups) == 0 {
		return nil
	}
	var out []*tracked
	for _, g := range m.Groups {
		for _, gb := range x.byGroup[g] {
			t := s.member(gb, m.Tenant)
			if !slices.Contains(out, t) { // a group the token names twice
				out = append(out, t)
			}
		}
	}
	return out
}

// OverMember is Over for m's own budgets of their groups' budgets.
func (s *Set) OverMember(m Member) *apierror.Error {
	if s == nil {
		return nil
	}
	x := s.idx.Load()
	if m.Tenant == "" || len(x.groups) == 0 {
		return nil
	}
	now := time.Now()
	for _, g := range m.Groups { // not through ofMember: no allocation on the request path
		for _, gb := range x.byGroup[g] {
			if e := s.over(s.member(gb, m.Tenant), now); e != nil {
				return e
			}
		}
	}
	return nil
}
