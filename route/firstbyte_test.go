package route

import (
	"testing"
	"time"
)

// TestFirstByteBound: a key's bound on the wait for its headers is four
// times the p99 of its own answers' times, per kind, never under the
// floor; a bigger request than usual is given time in proportion; a key
// with too few answers of its own is judged by every key's; with too few
// anywhere, nothing is learnt.
func TestFirstByteBound(t *testing.T) {
	p := twoKeys(t, nil)
	a1, a2, b1 := p.Keys[0], p.Keys[1], p.Keys[2]
	p.FirstByteFloor = 100 * time.Millisecond

	if _, ok := p.FirstByteBound(a1, true, 100); ok {
		t.Fatal("a bound learnt from no answers")
	}
	for i := range firstByteMin - 1 {
		p.FirstByte(a1, true, 100, time.Duration(i+1)*10*time.Millisecond)
	}
	if _, ok := p.FirstByteBound(a1, true, 100); ok {
		t.Fatalf("a bound learnt from %d answers; want at least %d", firstByteMin-1, firstByteMin)
	}
	p.FirstByte(a1, true, 100, 200*time.Millisecond) // 10 ms … 200 ms, 20 answers
	check := func(name string, k *Key, stream bool, size int, want time.Duration) {
		t.Helper()
		got, ok := p.FirstByteBound(k, stream, size)
		if !ok || got != want {
			t.Errorf("%s: bound %v (learnt %v); want %v", name, got, ok, want)
		}
	}
	check("own streams", a1, true, 100, 800*time.Millisecond)
	check("a smaller stream: no less than usual", a1, true, 10, 800*time.Millisecond)
	check("a stream ten times the size", a1, true, 1000, 8*time.Second)
	check("a key without answers, by its peers'", b1, true, 100, 800*time.Millisecond)
	if _, ok := p.FirstByteBound(a1, false, 100); ok {
		t.Error("whole answers' bound learnt from streams: their headers come after the last token")
	}

	// The peers' answers stand in only until the key has enough of its own.
	for range firstByteMin {
		p.FirstByte(b1, true, 100, 2*time.Second)
	}
	check("its own, once known", b1, true, 100, 8*time.Second)
	check("the pool's for a key still without", a2, true, 100, 8*time.Second)

	p.FirstByteFloor = 10 * time.Second
	check("never under the floor", a1, true, 100, 10*time.Second)

	// A key is alive once it sends an answer's headers.
	since := time.Now()
	if a2.AnsweredSince(since) {
		t.Error("a2 answered since now without an answer")
	}
	p.FirstByte(a2, false, 100, time.Second)
	if !a2.AnsweredSince(since) || a1.AnsweredSince(since) {
		t.Error("AnsweredSince: want a2, which answered, and not a1")
	}
	if got := WholeAnswerBound(4096); got != 4096*time.Second/10 {
		t.Errorf("WholeAnswerBound(4096) = %v; want 409.6 s", got)
	}

	// The ring keeps the latest answers: a key that got slow is judged by
	// its slow answers once they are all it has.
	for range firstByteRing {
		p.FirstByte(a1, true, 100, 5*time.Second)
	}
	check("the latest answers", a1, true, 100, 20*time.Second)
}
