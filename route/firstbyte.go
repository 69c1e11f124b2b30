package route

import (
	"slices"
	"sync"
	"time"
)

// Times to first byte: how long each key took to send an answer's
// headers. They bound how long a call on the key waits for its headers
// before the key counts as failing (see FirstByteBound): a backend that
// accepts connections and never answers is found out in a few of its
// peers' answer times, not at UPSTREAM_TIMEOUT_S or a request's deadline.
// A stream's headers come before its first token, a whole answer's after
// its last: the two are learnt apart.

const (
	// DefaultFirstByteFloor is Pool.FirstByteFloor's default: no learnt
	// bound is shorter.
	DefaultFirstByteFloor = 10 * time.Second
	// firstByteFactor is how many times its p99 a key's bound is: a key
	// that is only slower than usual is not cut.
	firstByteFactor = 4
	// firstByteRing is how many of a key's latest answers of each kind are
	// kept, and firstByteMin how many are needed to learn from.
	firstByteRing = 128
	firstByteMin  = 20
)

// firstByte is one answer's time to its headers and the request's size
// (its estimated input tokens, and for a whole answer its max_tokens
// too): a bigger request than those learnt from is given more time.
type firstByte struct {
	took time.Duration
	size int
}

// firstBytes is a key's latest times to first byte, by kind (0: whole
// answers, 1: streams).
type firstBytes struct {
	mu   sync.Mutex
	n    [2]int // answers recorded ever
	ring [2][firstByteRing]firstByte
}

func kindOf(stream bool) int {
	if stream {
		return 1
	}
	return 0
}

// FirstByte records that a call on k of size (see FirstByteBound) had its
// answer's headers after took: an answer, not an error status, which
// comes fast whatever the key's load.
func (p *Pool) FirstByte(k *Key, stream bool, size int, took time.Duration) {
	f, i := &k.firstBytes, kindOf(stream)
	f.mu.Lock()
	f.ring[i][f.n[i]%firstByteRing] = firstByte{took: took, size: max(size, 1)}
	f.n[i]++
	f.mu.Unlock()
	k.answeredAt.Store(time.Now().UnixNano())
}

// AnsweredSince reports whether k sent an answer's headers after t: a
// key that answers other calls is alive, whatever one call waits for.
func (k *Key) AnsweredSince(t time.Time) bool {
	return k.answeredAt.Load() > t.UnixNano()
}

// WholeAnswerBound is how long a whole (not streamed) answer of size
// (estimated input tokens plus max_tokens) may take on a key that is
// answering other calls: its size at wholeAnswerMinRate. Its headers come
// after its last token, so a long one among short ones of the same
// max_tokens is no sign of a dead key, and cut it would be generated
// (and billed) again elsewhere.
func WholeAnswerBound(size int) time.Duration {
	return time.Duration(max(size, 1)) * time.Second / wholeAnswerMinRate
}

// wholeAnswerMinRate is tokens per second, slower than any Claude model
// writes.
const wholeAnswerMinRate = 10

// FirstByteBound is how long a call on k of size (its estimated input
// tokens, plus its max_tokens for a whole answer) may wait for its
// answer's headers before k counts as failing: firstByteFactor times the
// p99 of k's own latest times to first byte of its kind, or, for a
// request bigger than usual, of those times per unit of size times its
// size; never under FirstByteFloor. A key with too few answers of its
// own (one that never answered is the one to find out) is judged by every
// key's answers. ok is false while too few are known anywhere: then
// nothing is learnt, and only UPSTREAM_TIMEOUT_S bounds the wait.
func (p *Pool) FirstByteBound(k *Key, stream bool, size int) (bound time.Duration, ok bool) {
	i := kindOf(stream)
	samples := k.firstBytes.samples(i, nil)
	if len(samples) < firstByteMin {
		samples = samples[:0]
		for _, kk := range p.Keys {
			samples = kk.firstBytes.samples(i, samples)
		}
	}
	if len(samples) < firstByteMin {
		return 0, false
	}
	took := make([]float64, len(samples))
	per := make([]float64, len(samples))
	for j, s := range samples {
		took[j] = float64(s.took)
		per[j] = float64(s.took) / float64(s.size)
	}
	b := max(p99(took), p99(per)*float64(max(size, 1))) * firstByteFactor
	if b > float64(maxFirstByteBound) {
		b = float64(maxFirstByteBound)
	}
	return max(time.Duration(b), p.FirstByteFloor), true
}

// maxFirstByteBound keeps a learnt bound's arithmetic in range; the
// caller's UPSTREAM_TIMEOUT_S is the real cap.
const maxFirstByteBound = 24 * time.Hour

// samples appends f's latest answers of kind i to out.
func (f *firstBytes) samples(i int, out []firstByte) []firstByte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append(out, f.ring[i][:min(f.n[i], firstByteRing)]...)
}

// p99 is the 99th percentile of xs (nearest rank), which it sorts.
func p99(xs []float64) float64 {
	slices.Sort(xs)
	return xs[(len(xs)*99+99)/100-1]
}
