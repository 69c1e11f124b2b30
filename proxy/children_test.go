package proxy

import (
	"sync"
	"sync/atomic"
	"testing"
)

// A child is made once per label values, on first use, whoever asks and
// however many ask at once; each asker gets that one.
func TestChildrenAreMadeOnceOnFirstUse(t *testing.T) {
	var c children[requestLabels, *int]
	var made atomic.Int32
	newChild := func(requestLabels) *int { made.Add(1); return new(int) }
	if c.m != nil {
		t.Fatal("a child before any use")
	}
	k := requestLabels{"messages", 200, "plain"}
	var wg sync.WaitGroup
	got := make([]*int, 8)
	for i := range got {
		wg.Go(func() { got[i] = c.get(k, newChild) })
	}
	wg.Wait()
	for _, v := range got {
		if v != got[0] {
			t.Fatal("two askers got different children for the same labels")
		}
	}
	if c.get(requestLabels{"messages", 529, "plain"}, newChild) == got[0] {
		t.Error("other label values got the same child")
	}
	if n := made.Load(); n != 2 {
		t.Errorf("%d children made; want 2", n)
	}
}
