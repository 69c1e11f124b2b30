package cacheaware

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/window"
)

// Idle release and Release: the leader, released alone at once, is
// registered, and requests arriving later on its prefix, each released
// alone at once too, are still held as its followers until its response
// begins: the group forms without the window staying open.
func TestIdleReleaseCacheGroupStillForms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		groups := 0
		r := newCacheRig(t, dispatch.Config{MaxSize: 16, MaxWait: 20 * time.Millisecond, Timeout: time.Minute, IdleRelease: true}, 4,
			&Release{Grouped: func() { groups++ }})
		outs := []<-chan outcome{r.send(t.Context(), "leader", shared(7), beginAfter(time.Second))}
		time.Sleep(5 * time.Millisecond)
		outs = append(outs, r.send(t.Context(), "f1", shared(7), sleepFor(time.Second)))
		time.Sleep(time.Millisecond)
		outs = append(outs, r.send(t.Context(), "f2", shared(7), sleepFor(time.Second)))
		if n := r.gate.joins.Load(); n != 1 {
			t.Errorf("gate joins = %d; want 1, the leader", n)
		}
		for _, o := range outs {
			<-o
		}
		r.wantStarts(t,
			cacheStart{"leader", 0, asLeader},
			cacheStart{"f1", time.Second, follower(CacheFollower, 995*time.Millisecond, ReleasedBegun)},
			cacheStart{"f2", time.Second, follower(CacheFollower, 994*time.Millisecond, ReleasedBegun)},
		)
		if groups != 1 {
			t.Errorf("groups formed = %d; want 1", groups)
		}
		want := []flushEvent{
			{1, 1, window.ReasonIdle, 0},
			{2, 1, window.ReasonIdle, 5 * time.Millisecond},
			{3, 1, window.ReasonIdle, 6 * time.Millisecond},
		}
		if got := r.flushed(); !slices.Equal(got, want) {
			t.Errorf("flushes = %v; want %v", got, want)
		}
	})
}
