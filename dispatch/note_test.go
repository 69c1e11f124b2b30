package dispatch

import (
	"sync"
	"testing"
)

// A process may declare any number of notes (a fifth stateful policy used
// to panic at start): past the ones a member holds in place, they live in
// a slice made with the member, or grown for a member made before they
// were declared; each keeps its own record, from several goroutines at
// once. The notes are declared here, not in package variables, so that
// the benchmarks' members (go test -run '^$') are made as in production.
func TestNotesHaveNoFixedNumber(t *testing.T) {
	early := &Member{more: moreNotes()} // made before the notes below
	var notes []Note[int]
	for range inlineNotes + 2 {
		notes = append(notes, NewNote[int]())
	}
	late := &Member{more: moreNotes()}
	for name, m := range map[string]*Member{"made before": early, "made after": late} {
		var wg sync.WaitGroup
		for i, n := range notes {
			if n.Peek(m) != nil {
				t.Fatalf("%s: note %d has a record before Make", name, i)
			}
			wg.Go(func() { *n.Make(m) = i + 1 })
		}
		wg.Wait()
		for i, n := range notes {
			if r := n.Peek(m); r == nil || *r != i+1 {
				t.Errorf("%s: note %d holds %v; want %d", name, i, r, i+1)
			}
		}
	}
}
