package cacheaware

import (
	"github.com/sluicehq/sluice/dispatch"
	"time"
)

// What the cache-aware release made of a member, for its access line
// and the metrics.

// Role is what a request was to the prompt cache when Release put
// it in line.
type Role uint8

// String is the role as the access line says it ("" for CacheNone).
func (r Role) String() string {
	switch r {
	case CacheLeader:
		return "leader"
	case CacheFollower:
		return "follower"
	case CacheWarm:
		return "warm"
	}
	return ""
}

// Standing is what Release made of a member; the zero value when
// the scheduler's releaser is not Release.
type Standing struct {
	Role     Role
	Held     time.Duration // how long a follower was held outside the gate
	Released string        // why a follower's hold ended: one of the Released* values
}

// StandingOf is what the cache-aware release made of m. Read it from the
// member's function (it is final once the member is in line).
func StandingOf(m *dispatch.Member) Standing {
	if pl := placeNote.Peek(m); pl != nil {
		return pl.Standing
	}
	return Standing{}
}

// expectedRead is what of its prompt m, placed as pl says, is expected
// to read from the cache: the prefix it found warm, or the one it
// followed once its leader began; nothing as a leader, or as a follower
// that went before its leader began (it writes the prefix itself).
func expectedRead(pl *cachePlace) int {
	if pl.Role != CacheWarm && (pl.Role != CacheFollower || pl.Released != ReleasedBegun) {
		return 0
	}
	return pl.reads
}

// placeNote is Release's record of each member it placed: only members
// with a cacheable prefix have one.
var placeNote = dispatch.NewNote[cachePlace]()

// placeOf is m's record, which Release made when it placed m. c.mu is
// held, or m's hold has ended.
func placeOf(m *dispatch.Member) *cachePlace { return placeNote.Peek(m) }

// cachePlace is a member's place in the Release registry.
type cachePlace struct {
	Standing
	seq      uint64                 // arrival order among cacheable members
	heldFrom time.Time              // when its hold began
	until    time.Time              // when its hold ends at the latest
	join     func(*dispatch.Member) // its scheduler's join
	c        *Release               // the release that placed it: only it learns from the reads (Used)
	// group is the group of a follower its leader's beginning freed;
	// floor the tokens of its next shorter cacheable prefix, which a read
	// must pass to be of the prefix it followed (see Used).
	group *cacheGroup
	floor int
	// reads is the tokens of the prefix it found warm or followed: what
	// it reads from the cache, if it reads (its longer prefixes it writes).
	reads int
	// probe is the longest of its prefixes that was not held on (see
	// DoubtGroups), and probeFloor its floor: a read past it shows the
	// prefix cached after all.
	probe      *cacheGroup
	probeFloor int
}

const (
	CacheNone     Role = iota // no prefix at or above its model's minimum: put in line at once, as by InOrder
	CacheLeader               // the first on a cold prefix: put in line at once, to write it
	CacheFollower             // held outside the gate for a leader on its prefix, then put in line
	CacheWarm                 // its prefix was warm: put in line at once, to read it
)

// Why a follower's hold ended (Standing.Released).
const (
	ReleasedBegun    = "begun"    // its leader's response began: the cache entry exists
	ReleasedPromoted = "promoted" // its leader ended without an answer: it leads now
	ReleasedBound    = "bound"    // the leader wait, or its own deadline or patience, ran out
	ReleasedEvicted  = "evicted"  // its prefix was pushed out of the registry
)
