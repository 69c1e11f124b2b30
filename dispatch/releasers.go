package dispatch

import (
	"sync"

	"github.com/sluicehq/sluice/window"
)

// Releasers chains releasers, so that policies of wave release compose
// (the cache-aware release and, say, coalescing): each closed wave goes
// to the first; every member it joins goes on to the next, and so on; the
// last one's joins put members in line. The members a releaser joins
// while its Release runs go on together, as one wave, so that the next
// can still see them side by side; each one it joins later (a follower
// let go once its leader's answer began) goes on alone, as a wave of one.
// The waves the later releasers get share the closed wave's ID, reason
// and times; their Done channel is not the window's, and is never closed.
// An empty chain releases as InOrder does.
type Releasers []Releaser

var _ Releaser = Releasers{}

// Release sends w through the chain.
func (rs Releasers) Release(w *window.Wave[*Member], join func(*Member)) {
	switch len(rs) {
	case 0:
		InOrder{}.Release(w, join)
		return
	case 1:
		rs[0].Release(w, join)
		return
	}
	next := rs[1:]
	var (
		mu        sync.Mutex
		releasing = true
		together  []*Member
	)
	rs[0].Release(w, func(m *Member) {
		mu.Lock()
		if releasing {
			together = append(together, m)
			mu.Unlock()
			return
		}
		mu.Unlock()
		next.Release(w.Part([]*Member{m}), join)
	})
	mu.Lock()
	releasing = false
	mu.Unlock()
	if len(together) > 0 {
		next.Release(w.Part(together), join)
	}
}
