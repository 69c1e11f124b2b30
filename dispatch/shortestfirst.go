package dispatch

import (
	"cmp"
	"slices"

	"github.com/sluicehq/sluice/window"
)

// ShortestFirst is a Releaser that puts each wave's members in line in the
// order of their estimated cost, the smallest first (input tokens and
// max_tokens; ties in arrival order), so that under a full gate the short
// requests of a wave are not kept waiting behind its long ones: the
// wave's mean wait falls, and a long request waits behind its own wave's
// shorter members at most, since the next wave joins after it. It sorts
// only what it is given: chained after the cache-aware release
// (Releasers), it orders the members put in line at once and leaves the
// followers' later release alone.
type ShortestFirst struct{}

var _ Releaser = ShortestFirst{}

// Release joins w's members, the cheapest first.
func (ShortestFirst) Release(w *window.Wave[*Member], join func(*Member)) {
	slices.SortStableFunc(w.Items, func(a, b *Member) int { return cmp.Compare(costOf(a), costOf(b)) })
	for _, m := range w.Items {
		join(m)
	}
}

// costOf is m's estimated cost in tokens.
func costOf(m *Member) int64 {
	return int64(m.req.Cost.InputTokens) + int64(m.req.Cost.MaxTokens)
}
