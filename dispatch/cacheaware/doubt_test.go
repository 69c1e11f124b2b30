package cacheaware

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/dispatch"
)

// reading is a function whose answer takes d and reads tokens from the
// cache (a leader's response begins at once).
func reading(d time.Duration, tokens int) memberFunc {
	return func(ctx context.Context, m *dispatch.Member) error {
		m.MarkBegun()
		time.Sleep(d)
		m.Used(dispatch.Usage{CacheRead: tokens})
		return nil
	}
}

// doubtRig is a cacheRig whose Release's news of doubts is kept.
type doubtRig struct {
	*cacheRig
	mu   sync.Mutex
	news []Doubt
}

func newDoubtRig(t *testing.T) *doubtRig {
	d := &doubtRig{}
	c := &Release{Doubted: func(n Doubt) { d.mu.Lock(); d.news = append(d.news, n); d.mu.Unlock() }}
	d.cacheRig = newCacheRig(t, dispatch.Config{MaxSize: 3, MaxWait: time.Hour, Timeout: time.Minute}, 4, c)
	return d
}

func (d *doubtRig) doubts() []Doubt {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Doubt(nil), d.news...)
}

// burst sends a wave of three on prefix key 9, each reading read tokens,
// and waits until they are done and the prefix has gone cold (past its
// 5-minute TTL); it returns the roles they had.
func (d *doubtRig) burst(t *testing.T, read int) []Role {
	t.Helper()
	before := len(d.started())
	var outs []<-chan outcome
	for _, name := range []string{"a", "b", "c"} {
		outs = append(outs, d.send(t.Context(), name, shared(9), reading(time.Second, read)))
	}
	for _, o := range outs {
		if o := <-o; o.err != nil {
			t.Fatal(o.err)
		}
	}
	time.Sleep(6 * time.Minute)
	var roles []Role
	for _, s := range d.started()[before:] {
		roles = append(roles, s.st.Role)
	}
	return roles
}

func countRole(roles []Role, r Role) int {
	n := 0
	for _, x := range roles {
		if x == r {
			n++
		}
	}
	return n
}

// Followers held for a prefix that then read none of it, three groups in
// a row: the prefix is not held on from then on (a burst goes at once,
// with no roles), for the cool-off; then one group may form again, and
// reading nothing either it is not held on again at once. A request seen
// to read it, while it is not held on, makes it held on again.
func TestCacheDoubtStopsHolding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDoubtRig(t)
		for i := range 3 {
			roles := d.burst(t, 0)
			if countRole(roles, CacheFollower) != 2 {
				t.Fatalf("burst %d: roles %v; want a leader and two followers", i+1, roles)
			}
			if n := len(d.doubts()); (n == 1) != (i == 2) {
				t.Fatalf("after burst %d: doubts %+v; want one, after the third", i+1, d.doubts())
			}
		}
		news := d.doubts()
		if n := news[0]; n.Key != 9 || n.Trusted || n.Groups != 3 || n.Tokens != 2000 {
			t.Errorf("doubt %+v; want key 9 (2000 tokens) not held on after 3 groups", n)
		}
		if n := d.c.Distrusted(); n != 1 {
			t.Errorf("Distrusted() = %d; want 1", n)
		}
		// Not held on: a burst goes at once, as if it had no prefix.
		if roles := d.burst(t, 0); countRole(roles, CacheNone) != 3 {
			t.Errorf("a burst while doubted: roles %v; want none held, no roles", roles)
		}
		// 12 minutes have passed since the doubt: past the cool-off one
		// group forms, reads nothing, and the prefix is doubted again.
		if roles := d.burst(t, 0); countRole(roles, CacheFollower) != 2 {
			t.Errorf("a burst past the cool-off: roles %v; want a group again", roles)
		}
		if news := d.doubts(); len(news) != 2 || news[1].Trusted || news[1].Groups != 4 {
			t.Errorf("doubts %+v; want a second, after the fourth unread group", news)
		}
		// A burst within the cool-off that reads the prefix: it is not
		// held, but the prefix is held on again, and the next burst forms
		// a group.
		if roles := d.burst(t, 2000); countRole(roles, CacheNone) != 3 {
			t.Errorf("the reading burst while doubted: roles %v; want none held", roles)
		}
		if news := d.doubts(); len(news) != 3 || !news[2].Trusted || news[2].Key != 9 {
			t.Errorf("doubts %+v; want the prefix held on again", news)
		}
		if n := d.c.Distrusted(); n != 0 {
			t.Errorf("Distrusted() = %d; want 0", n)
		}
		if roles := d.burst(t, 2000); countRole(roles, CacheFollower) != 2 {
			t.Errorf("a burst once trusted again: roles %v; want a group", roles)
		}
	})
}

// Groups whose followers read the prefix, and an unread group between
// read ones, never stop the holding: only groups in a row count.
func TestCacheDoubtNeedsGroupsInARow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDoubtRig(t)
		for i, read := range []int{0, 0, 2000, 0, 0, 2000, 0, 0} {
			if roles := d.burst(t, read); countRole(roles, CacheFollower) != 2 {
				t.Fatalf("burst %d: roles %v; want a group", i+1, roles)
			}
		}
		if news := d.doubts(); len(news) != 0 {
			t.Errorf("doubts %+v; want none", news)
		}
	})
}

// A read of a shorter prefix alone is not a read of the one followed:
// followers of the second prefix (4000 tokens) that read only the first
// (2000) count as having read none of it.
func TestCacheDoubtShorterPrefixRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDoubtRig(t)
		for range 3 {
			var outs []<-chan outcome
			for _, name := range []string{"a", "b", "c"} {
				outs = append(outs, d.send(t.Context(), name, shared(1, 2), reading(time.Second, 2000)))
			}
			for _, o := range outs {
				<-o
			}
			time.Sleep(6 * time.Minute)
		}
		if news := d.doubts(); len(news) != 1 || news[0].Key != 2 || news[0].Tokens != 4000 {
			t.Errorf("doubts %+v; want the 4000-token prefix 2 not held on", news)
		}
	})
}
