package gate

import (
	"container/heap"
	"time"
)

// Fair is an Order that shares a Local gate's slots among keys (tenants)
// by start-time fair queueing on cost: each ticket's start tag is the
// later of its key's last finish tag and the line's virtual time, its
// finish tag that start plus Cost over its key's Weight, and the next
// slot goes to the lowest start tag waiting. So over a long run each key
// that keeps tickets waiting gets slots in proportion to its weight,
// counted in cost rather than in calls: a key of large requests gets
// fewer of them. Tickets of one key and class are granted in the order
// they joined; a key with one ticket waiting is served within one round
// of the others, however many the others have waiting.
//
// Classes come first: a ticket of ClassBatch is granted only when no
// ClassInteractive ticket may be, or once the oldest batch ticket has
// waited StarveAfter, when the next slot goes to the batch class.
//
// A key that holds MaxInFlight slots waits, whatever its tags, until one
// comes back; other keys take the free slots meanwhile.
//
// With one key and one class Fair is FIFO, exactly. What it remembers of
// a key is dropped once the key has nothing waiting and no slot, and
// either the line has emptied or the key is no longer ahead of the line's
// virtual time; so its memory is bounded by the keys active at once,
// which its caller bounds.
//
// Fair keeps the line of the Local gate built with it (gate.New), which
// tells it of every grant and release; one Fair serves one gate. Place,
// for a gate that keeps a Line of its own, is FIFO.
type Fair struct {
	// StarveAfter is how long the oldest ticket of a lower class may wait
	// while a higher class is served before the lower class gets the
	// next slot. Zero: never; a lower class waits while a higher one may
	// be granted.
	StarveAfter time.Duration

	start   time.Time
	seq     uint64
	keys    map[string]*fairKey
	classes [numClasses]fairClass
	waiting int
	grants  int // since the last sweep
	sweepAt int // sweep when a new key would make this many
}

// fairKey is one key's share: its flows, one per class, and the slots it
// holds.
type fairKey struct {
	name     string
	inFlight int
	max      int // MaxInFlight of its latest ticket; 0: no limit
	flows    [numClasses]fairFlow
}

// fairFlow is one key's tickets of one class, in join order.
type fairFlow struct {
	key        *fairKey
	class      Class
	head, tail *Ticket
	n          int
	finish     float64 // finish tag of the flow's last granted ticket
	weight     float64
	idx        int // in its class's heap; -1 when not in it
}

// fairClass is the line of one class: the flows that may be granted,
// lowest head start tag first, the virtual time, and every waiting
// ticket in join order (the oldest first, for the starvation bound).
type fairClass struct {
	v              float64
	flows          flowHeap
	oldest, newest *Ticket
}

var (
	_ Order = (*Fair)(nil)
	_ Queue = (*Fair)(nil)
)

// NewFair returns a fair order whose lower classes wait at most
// starveAfter behind a higher one (zero: as long as the higher one has
// tickets that may be granted).
func NewFair(starveAfter time.Duration) *Fair {
	return &Fair{StarveAfter: starveAfter, start: time.Now(), keys: map[string]*fairKey{}}
}

// sweepEvery is how many grants pass between looks for keys to forget
// while the line stays busy.
const sweepEvery = 4096

// Place gives places in join order, for a gate that keeps its own Line.
func (f *Fair) Place(*Ticket) uint64 {
	f.seq++
	return f.seq
}

// flowOf is the flow t joins, made if need be, with the key's latest
// weight and limit.
func (f *Fair) flowOf(t *Ticket) *fairFlow {
	if f.keys == nil {
		f.keys, f.start = map[string]*fairKey{}, time.Now()
	}
	k := f.keys[t.Key]
	if k == nil {
		if len(f.keys) >= f.sweepAt {
			// Keys granted at Join with nobody waiting are swept
			// nowhere else: sweep as the map doubles.
			f.sweep()
			f.sweepAt = max(64, 2*len(f.keys))
		}
		k = &fairKey{name: t.Key}
		for c := range k.flows {
			k.flows[c] = fairFlow{key: k, class: Class(c), idx: -1}
		}
		f.keys[t.Key] = k
	}
	k.max = t.MaxInFlight
	fl := &k.flows[min(t.Class, numClasses-1)]
	fl.weight = t.Weight
	if fl.weight <= 0 {
		fl.weight = 1
	}
	t.flow = fl
	return fl
}

// capped reports whether k holds all the slots it may.
func (k *fairKey) capped() bool { return k.max > 0 && k.inFlight >= k.max }

// cost is t's cost in its flow's virtual time.
func (fl *fairFlow) cost(t *Ticket) float64 { return float64(max(t.Cost, 1)) / fl.weight }

func (f *Fair) Free(t *Ticket) bool {
	k := f.keys[t.Key]
	return k == nil || !(t.MaxInFlight > 0 && k.inFlight >= t.MaxInFlight)
}

// grantedAtJoin charges t, granted with nobody waiting, to its key: the
// virtual time moves to its start, so that idle slots a key used are not
// held against it later.
func (f *Fair) GrantedAtJoin(t *Ticket) {
	fl := f.flowOf(t)
	c := &f.classes[fl.class]
	c.v = max(fl.finish, c.v)
	fl.finish = c.v + fl.cost(t)
	fl.key.inFlight++
}

func (f *Fair) Push(t *Ticket) {
	fl := f.flowOf(t)
	c := &f.classes[fl.class]
	f.seq++
	t.wait(f.seq)
	t.joined = time.Since(f.start)
	t.prev, t.next = fl.tail, nil
	if fl.tail != nil {
		fl.tail.next = t
	} else {
		fl.head = t
		t.tag = max(fl.finish, c.v)
	}
	fl.tail = t
	fl.n++
	t.cprev, t.cnext = c.newest, nil
	if c.newest != nil {
		c.newest.cnext = t
	} else {
		c.oldest = t
	}
	c.newest = t
	f.waiting++
	if fl.head == t && !fl.key.capped() {
		heap.Push(&c.flows, fl)
	}
}

// unlink takes t out of its flow and its class's list.
func (f *Fair) unlink(t *Ticket) {
	fl := t.flow
	c := &f.classes[fl.class]
	lineLinks.remove(t, &fl.head, &fl.tail)
	fl.n--
	classLinks.remove(t, &c.oldest, &c.newest)
	f.waiting--
}

func (f *Fair) Remove(t *Ticket) {
	fl := t.flow
	wasHead := fl.head == t
	f.unlink(t)
	if wasHead {
		f.headChanged(fl)
	}
	if f.waiting == 0 {
		f.sweep()
	}
}

// headChanged tags fl's new head, if any, and puts fl where it belongs in
// its class's heap.
func (f *Fair) headChanged(fl *fairFlow) {
	c := &f.classes[fl.class]
	if fl.head == nil {
		if fl.idx >= 0 {
			heap.Remove(&c.flows, fl.idx)
		}
		return
	}
	fl.head.tag = max(fl.finish, c.v)
	switch {
	case fl.key.capped():
		if fl.idx >= 0 {
			heap.Remove(&c.flows, fl.idx)
		}
	case fl.idx >= 0:
		heap.Fix(&c.flows, fl.idx)
	default:
		heap.Push(&c.flows, fl)
	}
}

func (f *Fair) Next() *Ticket {
	if f.waiting == 0 {
		return nil
	}
	class := -1
	for c := range f.classes {
		if len(f.classes[c].flows) > 0 {
			class = c
			break
		}
	}
	if class < 0 {
		return nil // every key with tickets waiting holds all it may
	}
	if f.StarveAfter > 0 && class < int(numClasses)-1 {
		now := time.Since(f.start)
		for c := int(numClasses) - 1; c > class; c-- {
			lc := &f.classes[c]
			if len(lc.flows) > 0 && now-lc.oldest.joined >= f.StarveAfter {
				class = c
				break
			}
		}
	}
	t := f.classes[class].flows[0].head
	f.unlink(t)
	return t
}

func (f *Fair) Taken(t *Ticket, ok bool) {
	fl := t.flow
	if ok {
		c := &f.classes[fl.class]
		c.v = max(c.v, t.tag)
		fl.finish = t.tag + fl.cost(t)
		fl.key.inFlight++
		if fl.key.capped() {
			for i := range fl.key.flows {
				if o := &fl.key.flows[i]; o != fl && o.idx >= 0 {
					heap.Remove(&f.classes[i].flows, o.idx)
				}
			}
		}
	}
	f.headChanged(fl)
	f.grants++
	if f.waiting == 0 || f.grants >= sweepEvery {
		f.sweep()
	}
}

func (f *Fair) Released(t *Ticket) {
	k := t.flow.key
	wasCapped := k.capped()
	k.inFlight--
	if wasCapped && !k.capped() {
		for i := range k.flows {
			if fl := &k.flows[i]; fl.head != nil && fl.idx < 0 {
				heap.Push(&f.classes[i].flows, fl)
			}
		}
	}
}

func (f *Fair) Len() int { return f.waiting }

// sweep forgets the keys that hold no slot, have nothing waiting and are
// not ahead of their classes' virtual time (any key, when the line is
// empty: credit and debt last one busy stretch).
func (f *Fair) sweep() {
	f.grants = 0
	for name, k := range f.keys {
		if k.inFlight > 0 {
			continue
		}
		idle := true
		for i := range k.flows {
			fl := &k.flows[i]
			if fl.n > 0 || f.waiting > 0 && fl.finish > f.classes[i].v {
				idle = false
				break
			}
		}
		if idle {
			delete(f.keys, name)
		}
	}
}

// flowHeap orders a class's flows by their heads' start tags, ties in
// join order.
type flowHeap []*fairFlow

func (h flowHeap) Len() int { return len(h) }

func (h flowHeap) Less(i, j int) bool {
	a, b := h[i].head, h[j].head
	return a.tag < b.tag || a.tag == b.tag && a.place < b.place
}

func (h flowHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *flowHeap) Push(x any) {
	fl := x.(*fairFlow)
	fl.idx = len(*h)
	*h = append(*h, fl)
}

func (h *flowHeap) Pop() any {
	old := *h
	fl := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	fl.idx = -1
	return fl
}
