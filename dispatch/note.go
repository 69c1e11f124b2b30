package dispatch

import (
	"fmt"
	"sync/atomic"
)

// A Note is one policy's own record of each member: the policy declares
// one, once, and keeps its per-request state in it, so that a member
// carries every policy's state without declaring any of it, and a new
// policy's state needs no edit of Member. A policy makes a member's
// record at one point of the member's life it alone runs (CacheAware in
// Release, KeyBuckets in Pace) and guards it as it guards the rest of its
// state; Peek from anywhere else sees it once that point has passed.
type Note[T any] struct{ slot int }

// maxNotes bounds the notes declared in a process: each is a word pair on
// every member.
const maxNotes = 4

var notesDeclared atomic.Int32

// NewNote declares a note. Declare it once, in a package variable: each
// declaration takes a place on every member for the life of the process.
func NewNote[T any]() Note[T] {
	i := int(notesDeclared.Add(1)) - 1
	if i >= maxNotes {
		panic(fmt.Sprintf("dispatch: more than %d notes declared", maxNotes))
	}
	return Note[T]{slot: i}
}

// Make returns m's record, made on first use.
func (n Note[T]) Make(m *Member) *T {
	if r, ok := m.notes[n.slot].(*T); ok {
		return r
	}
	r := new(T)
	m.notes[n.slot] = r
	return r
}

// Peek returns m's record, or nil if the policy made none.
func (n Note[T]) Peek(m *Member) *T {
	r, _ := m.notes[n.slot].(*T)
	return r
}
