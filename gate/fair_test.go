package gate_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/gate/gatetest"
)

func TestFairConformance(t *testing.T) {
	gatetest.RunLimit(t, func(limit gate.Limit) gate.Gate {
		g, err := gate.New(limit, gate.NewFair(time.Second))
		if err != nil {
			t.Fatalf("New(%v, Fair): %v", limit, err)
		}
		return g
	})
}

// sim drives a gate without goroutines: each granted ticket is logged
// and held, and Step releases the oldest holder.
type sim struct {
	t       *testing.T
	g       *gate.Local
	holders []*gate.Ticket
	grants  []*gate.Ticket
}

func newSim(t *testing.T, slots int, f *gate.Fair) *sim {
	g, err := gate.New(gate.Fixed(slots), f)
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, g: g}
}

// join joins a ticket for key of the given cost, weight and class.
func (s *sim) join(key string, cost int64, weight float64, class gate.Class) *gate.Ticket {
	tk := &gate.Ticket{Key: key, Cost: cost, Weight: weight, Class: class}
	tk.OnGrant(func() bool {
		s.holders = append(s.holders, tk)
		s.grants = append(s.grants, tk)
		return true
	})
	s.g.Join(tk)
	return tk
}

// step releases the oldest holder and returns the tickets granted since
// the last step.
func (s *sim) step() []*gate.Ticket {
	n := len(s.grants)
	if len(s.holders) == 0 {
		s.t.Fatal("nobody holds a slot")
	}
	h := s.holders[0]
	s.holders = s.holders[1:]
	s.g.Release(h, gate.Outcome{End: gate.EndOK})
	return s.grants[n:]
}

// keepBacklogged runs steps grants of a gate whose keys each keep depth
// tickets waiting (a grant is replaced by a new ticket of the same key),
// and returns each key's grants and cost served.
func keepBacklogged(t *testing.T, slots, steps, depth int, keys map[string]struct {
	cost   int64
	weight float64
}) (grants map[string]int, served map[string]int64) {
	s := newSim(t, slots, gate.NewFair(0))
	for range depth {
		for _, k := range slices.Sorted(mapsKeys(keys)) {
			s.join(k, keys[k].cost, keys[k].weight, gate.ClassInteractive)
		}
	}
	grants, served = map[string]int{}, map[string]int64{}
	for range steps {
		for _, tk := range s.step() {
			grants[tk.Key]++
			served[tk.Key] += tk.Cost
			k := keys[tk.Key]
			s.join(tk.Key, k.cost, k.weight, gate.ClassInteractive)
		}
	}
	return grants, served
}

func mapsKeys[M ~map[string]V, V any](m M) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Over a long run, keys that always have tickets waiting get slots in
// proportion to their weights.
func TestFairSharesMatchWeights(t *testing.T) {
	keys := map[string]struct {
		cost   int64
		weight float64
	}{"a": {1000, 1}, "b": {1000, 2}, "c": {1000, 5}}
	grants, _ := keepBacklogged(t, 4, 40000, 50, keys)
	total := grants["a"] + grants["b"] + grants["c"]
	for k, w := range map[string]float64{"a": 1, "b": 2, "c": 5} {
		want := w / 8
		got := float64(grants[k]) / float64(total)
		if math.Abs(got-want)/want > 0.02 {
			t.Errorf("key %s (weight %v) got %.4f of the slots; want %.4f within 2%%", k, w, got, want)
		}
	}
}

// Shares are counted in cost: a key of requests ten times as large gets a
// tenth of the calls, and the same tokens.
func TestFairCostWeighting(t *testing.T) {
	keys := map[string]struct {
		cost   int64
		weight float64
	}{"big": {20000, 1}, "small": {2000, 1}}
	grants, served := keepBacklogged(t, 8, 40000, 50, keys)
	if r := float64(grants["small"]) / float64(grants["big"]); math.Abs(r-10)/10 > 0.03 {
		t.Errorf("small got %.2f times the calls of big; want 10 within 3%%", r)
	}
	if r := float64(served["small"]) / float64(served["big"]); math.Abs(r-1) > 0.03 {
		t.Errorf("small was served %.3f times the cost of big; want 1 within 3%%", r)
	}
}

// Each key's tickets are granted in the order they joined, whatever the
// costs and however the keys interleave; and one key alone is FIFO
// across classes' absence, exactly.
func TestFairFIFOWithinKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newSim(t, 3, gate.NewFair(0))
	joined := map[string][]*gate.Ticket{}
	for range 3 { // fill the slots
		s.join("x", 1, 1, gate.ClassInteractive)
	}
	for range 2000 {
		k := string(rune('a' + rng.IntN(5)))
		joined[k] = append(joined[k], s.join(k, 1+rng.Int64N(5000), float64(1+rng.IntN(3)), gate.ClassInteractive))
		if rng.IntN(2) == 0 {
			s.step()
		}
	}
	for s.g.Stats().Waiting > 0 {
		s.step()
	}
	got := map[string][]*gate.Ticket{}
	for _, tk := range s.grants[3:] {
		got[tk.Key] = append(got[tk.Key], tk)
	}
	for k, want := range joined {
		if !slices.Equal(got[k], want) {
			t.Errorf("key %s: %d tickets granted out of join order", k, len(want))
		}
	}

	one := newSim(t, 2, gate.NewFair(0))
	var order []*gate.Ticket
	for i := range 500 {
		tk := one.join("only", 1+rng.Int64N(5000), 1, gate.ClassInteractive)
		if i >= 2 {
			order = append(order, tk)
		}
		if rng.IntN(3) == 0 {
			one.step()
		}
	}
	for one.g.Stats().Waiting > 0 {
		one.step()
	}
	if !slices.Equal(one.grants[2:], order) {
		t.Error("one key alone: tickets not granted in join order")
	}
}

// A key that joins behind another's long backlog is served at the next
// free slot, not after the backlog.
func TestFairNewcomerNotBehindBacklog(t *testing.T) {
	s := newSim(t, 4, gate.NewFair(0))
	for range 1000 {
		s.join("burst", 1500, 1, gate.ClassInteractive)
	}
	for range 10 {
		s.step()
	}
	b := s.join("steady", 1500, 1, gate.ClassInteractive)
	if got := s.step(); len(got) != 1 || got[0] != b {
		t.Fatalf("next grant after the newcomer joined: %v; want the newcomer", keysOf(got))
	}
}

func keysOf(ts []*gate.Ticket) []string {
	var ks []string
	for _, tk := range ts {
		ks = append(ks, tk.Key)
	}
	return ks
}

// A key at its MaxInFlight waits, and the free slots go to other keys;
// when it gives one back, its next ticket is granted.
func TestFairMaxInFlight(t *testing.T) {
	s := newSim(t, 4, gate.NewFair(0))
	var capped []*gate.Ticket
	for range 10 {
		tk := &gate.Ticket{Key: "a", Cost: 1, MaxInFlight: 2}
		tk.OnGrant(func() bool { s.holders, s.grants = append(s.holders, tk), append(s.grants, tk); return true })
		s.g.Join(tk)
		capped = append(capped, tk)
	}
	if got := s.g.Stats(); got.InFlight != 2 || got.Waiting != 8 {
		t.Fatalf("after a's joins: %+v; want 2 in flight (its limit), 8 waiting", got)
	}
	b := s.join("b", 1, 1, gate.ClassInteractive)
	c := s.join("c", 1, 1, gate.ClassInteractive)
	if st := b.State(); st != gate.TicketGranted || c.State() != gate.TicketGranted {
		t.Fatalf("b and c, with slots free: states %v %v; want both granted", st, c.State())
	}
	s.join("b", 1, 1, gate.ClassInteractive) // waits: every slot is held
	got := s.step()                          // a's first slot back: a's third ticket, before b's second
	if len(got) != 1 || got[0] != capped[2] {
		t.Fatalf("a gave a slot back; granted %v, want a's third ticket", keysOf(got))
	}
	inA := 0
	for _, h := range s.holders {
		if h.Key == "a" {
			inA++
		}
	}
	if inA != 2 {
		t.Errorf("a holds %d slots; want 2", inA)
	}
}

// Interactive tickets go first; a batch ticket waits at most StarveAfter
// (and the slot turnover) however many interactive ones keep coming.
func TestFairClassStarvationBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const starve, hold = time.Second, 100 * time.Millisecond
		s := newSim(t, 1, gate.NewFair(starve))
		s.join("i", 1, 1, gate.ClassInteractive)
		start := time.Now()
		batch := s.join("b", 1, 1, gate.ClassBatch)
		s.join("b", 1, 1, gate.ClassBatch)
		var grantedAt time.Duration
		for range 40 {
			s.join("i", 1, 1, gate.ClassInteractive) // always one waiting
			time.Sleep(hold)
			for _, tk := range s.step() {
				if tk == batch {
					grantedAt = time.Since(start)
				}
				if tk.Class == gate.ClassBatch && time.Since(start) < starve {
					t.Fatalf("a batch ticket granted after %v, with interactive ones waiting", time.Since(start))
				}
			}
		}
		if grantedAt < starve || grantedAt > starve+hold {
			t.Errorf("the batch ticket was granted after %v; want within [%v, %v]", grantedAt, starve, starve+hold)
		}
		// With no interactive ticket waiting, batch goes at once.
		for s.g.Stats().Waiting > 0 {
			s.step()
		}
		late := s.join("b", 1, 1, gate.ClassBatch)
		s.step()
		if late.State() != gate.TicketGranted {
			t.Error("a batch ticket with nobody else waiting was not granted")
		}
	})
}
