// Package cachewhy explains prompt-cache writes: for a request whose
// answer wrote to the cache, it names the first block of its prompt that
// differs from the recent prompt sharing the most leading blocks with it,
// and how many tokens that shared run holds, which a matching block would
// have let it read.
//
// It keeps the recent prompts as their chained block hashes
// (request.Block.Hash), each of which names a whole run of leading blocks:
// a map of them is a trie of the recent prompts, in which a prompt's
// longest shared run is found in one lookup per block. Its memory is
// bounded by MaxNodes; the least recently seen runs go first.
package cachewhy

import (
	"cmp"
	"container/list"
	"slices"
	"strconv"
	"sync"

	"github.com/sluicehq/sluice/request"
)

// DefaultMaxNodes bounds an Index: about 1 MB, the blocks of a few
// hundred recent prompts (prompts that share a prefix share its nodes).
const DefaultMaxNodes = 8192

// What a write is put down to when no one block differs.
const (
	// New: no recent prompt starts with its first block. A new prompt,
	// or one whose very first block changes each time.
	New = "new"
	// Same: a recent prompt had the same blocks up to its last
	// breakpoint, so the prefix it wrote was sent before: that entry had
	// expired, or was not written yet when this one went (sent together,
	// which CACHE_AWARE groups).
	Same = "same"
	// Appended: it begins with the whole prefix a recent prompt cached,
	// and what it wrote is the blocks after it (a conversation's next
	// turn): no block differs, something was added. The API's lookback
	// finds that prefix, so the answer read it (unless it had expired).
	Appended = "appended"
	// BeyondLookback: it begins with the whole prefix a recent prompt
	// cached, but that prefix ends more than LookbackPositions block
	// boundaries before each of its breakpoints, where the API's
	// lookback does not reach: the whole shared run is written again. A
	// breakpoint nearer the last turn's end (the API allows 4) reads it.
	BeyondLookback = "beyond-lookback"
)

// clampIndex is where block labels stop naming each index: past it one
// label stands for the rest of its section, to bound the metric's series.
const clampIndex = 8

// Finding is what an Index makes of a prompt.
type Finding struct {
	// Block is the first block that differs from the recent prompt
	// sharing the longest run of leading blocks, by its place
	// ("system[0]"), or New, Same or Appended; "" when the prompt has no
	// breakpoint (it writes nothing).
	Block string
	// Label is Block for a metric: indexes from 8 on are one label per
	// section ("messages[>=8]").
	Label string
	// Shared is the estimated tokens of the shared run, up to the
	// prompt's last breakpoint at most: what a recent prompt's cache
	// entry holds of this one. A breakpoint caches everything before and
	// including its block, so with the differing block alike, this
	// prompt's next breakpoint would have read all of it.
	Shared int
}

// Unread is the tokens of f's shared run that an answer reading read
// tokens from the cache did not read: what the differing block cost in
// writes (estimated, as the shared run is).
func (f Finding) Unread(read int) int { return max(0, f.Shared-read) }

// Stat is the writes put down to one label, and their unread tokens.
type Stat struct {
	Block  string `json:"block"`
	Writes int64  `json:"writes"`
	Tokens int64  `json:"tokens"`
}

// Index is the recent prompts. The zero value is ready to use; it must not
// be copied after first use. Its methods are safe for concurrent use.
type Index struct {
	// MaxNodes bounds the runs kept; if zero, DefaultMaxNodes.
	MaxNodes int

	mu    sync.Mutex
	nodes map[uint64]*list.Element // of *node
	lru   list.List                // most recently seen first
	stats map[string]*Stat         // by label: at most 3 sections × 9, and the three others
}

// node is one run of leading blocks some recent prompt began with: ended
// when one of them ended there (its last breakpoint), continued when one
// went on past it.
type node struct {
	hash      uint64
	ended     bool
	continued bool
}

// Explain finds the recent prompt sharing the longest run of leading
// blocks with bs (a prompt's blocks, request.ParseBlocks), says what
// differs, and records bs up to its last breakpoint as a recent prompt.
func (x *Index) Explain(bs []request.Block) Finding {
	last := -1
	for i, b := range bs {
		if b.Breakpoint {
			last = i
		}
	}
	if last < 0 {
		return Finding{}
	}
	bs = bs[:last+1]
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.nodes == nil {
		x.nodes = map[uint64]*list.Element{}
	}
	shared := 0
	for shared < len(bs) && x.nodes[bs[shared].Hash] != nil {
		shared++
	}
	var f Finding
	switch {
	case shared == 0:
		f.Block = New
	case shared == len(bs):
		f.Block, f.Shared = Same, bs[last].Tokens
	case x.nodes[bs[shared-1].Hash].Value.(*node).ended && bs[shared-1].Lookback:
		f.Block, f.Shared = Appended, bs[shared-1].Tokens
	case x.nodes[bs[shared-1].Hash].Value.(*node).ended:
		f.Block, f.Shared = BeyondLookback, bs[shared-1].Tokens
	default:
		f.Block, f.Shared = bs[shared].Position(), bs[shared-1].Tokens
	}
	f.Label = f.Block
	if shared < len(bs) && f.Block != New && f.Block != Appended && f.Block != BeyondLookback && bs[shared].Index >= clampIndex {
		f.Label = bs[shared].Section.String() + "[>=" + strconv.Itoa(clampIndex) + "]"
	}
	x.record(bs)
	return f
}

// record adds bs's runs, the longest first, so that a prompt's shorter
// runs are always seen at least as recently as its longer ones and are
// dropped after them. x.mu is held.
func (x *Index) record(bs []request.Block) {
	limit := x.MaxNodes
	if limit <= 0 {
		limit = DefaultMaxNodes
	}
	for i := len(bs) - 1; i >= 0; i-- {
		el := x.nodes[bs[i].Hash]
		if el == nil {
			for x.lru.Len() >= limit {
				old := x.lru.Back()
				delete(x.nodes, old.Value.(*node).hash)
				x.lru.Remove(old)
			}
			el = x.lru.PushFront(&node{hash: bs[i].Hash})
			x.nodes[bs[i].Hash] = el
		} else {
			x.lru.MoveToFront(el)
		}
		n := el.Value.(*node)
		if i == len(bs)-1 {
			n.ended = true
		} else {
			n.continued = true
		}
	}
}

// Wrote counts a write put down to f, with unread tokens of its shared
// run not read, for Stats.
func (x *Index) Wrote(f Finding, unread int) {
	if f.Label == "" {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stats == nil {
		x.stats = map[string]*Stat{}
	}
	s := x.stats[f.Label]
	if s == nil {
		s = &Stat{Block: f.Label}
		x.stats[f.Label] = s
	}
	s.Writes++
	s.Tokens += int64(unread)
}

// Stats is the writes counted so far by label, the most unread tokens
// first.
func (x *Index) Stats() []Stat {
	x.mu.Lock()
	out := make([]Stat, 0, len(x.stats))
	for _, s := range x.stats {
		out = append(out, *s)
	}
	x.mu.Unlock()
	slices.SortFunc(out, func(a, b Stat) int {
		return cmp.Or(cmp.Compare(b.Tokens, a.Tokens), cmp.Compare(b.Writes, a.Writes), cmp.Compare(a.Block, b.Block))
	})
	return out
}

// Len is how many runs the index holds.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.lru.Len()
}
