package dispatch

import (
	"sync/atomic"
)

// A Note is one policy's own record of each member: the policy declares
// one, once, and keeps its per-request state in it, so that a member
// carries every policy's state without declaring any of it, and a new
// policy's state needs no edit of Member, whichever package the policy is
// in. A policy makes a member's record at one point of the member's life
// it alone runs (the cache-aware release in Release, the key buckets in
// Pace) and guards it as it guards the rest of its state; Peek from
// anywhere else sees it once that point has passed.
//
// Any number may be declared. The first inlineNotes live in the member
// itself, so that today's policies cost no allocation beyond their own
// records; the ones past them live in a slice made with the member, under
// its lock.
type Note[T any] struct{ slot int }

// inlineNotes is how many notes a member holds in place: each is a word
// pair on every member, so this is today's notes (the cache-aware
// release's, the key buckets', the routing's) and one to spare.
const inlineNotes = 4

var notesDeclared atomic.Int32

// NewNote declares a note. Declare it once, in a package variable: each
// declaration takes a place on every member made after it for the life of
// the process.
func NewNote[T any]() Note[T] {
	return Note[T]{slot: int(notesDeclared.Add(1)) - 1}
}

// Make returns m's record, made on first use.
func (n Note[T]) Make(m *Member) *T {
	if n.slot < inlineNotes {
		if r, ok := m.notes[n.slot].(*T); ok {
			return r
		}
		r := new(T)
		m.notes[n.slot] = r
		return r
	}
	m.sig.mu.Lock()
	defer m.sig.mu.Unlock()
	if m.more == nil {
		m.more = new([]any)
	}
	more := m.more
	i := n.slot - inlineNotes
	if i >= len(*more) {
		// A note declared after m was made (not in a package variable):
		// grown here, under the lock every access past the inline ones
		// takes.
		*more = append(*more, make([]any, i+1-len(*more))...)
	}
	if r, ok := (*more)[i].(*T); ok {
		return r
	}
	r := new(T)
	(*more)[i] = r
	return r
}

// Peek returns m's record, or nil if the policy made none.
func (n Note[T]) Peek(m *Member) *T {
	if n.slot < inlineNotes {
		r, _ := m.notes[n.slot].(*T)
		return r
	}
	m.sig.mu.Lock()
	defer m.sig.mu.Unlock()
	if i := n.slot - inlineNotes; m.more != nil && i < len(*m.more) {
		r, _ := (*m.more)[i].(*T)
		return r
	}
	return nil
}

// moreNotes is the room a member needs for the notes declared past the
// inline ones; nil while there are none.
func moreNotes() *[]any {
	if n := int(notesDeclared.Load()) - inlineNotes; n > 0 {
		more := make([]any, n)
		return &more
	}
	return nil
}
