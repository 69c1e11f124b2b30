package buckets

import (
	"context"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
)

// bucketRig is a rig paced by buckets.Pacing, whose members' functions record
// when they start and answer with the headers of an input-token limit of
// limit a minute, holding what the rig's own model of it says remains.
type bucketRig struct {
	*rig
	k *Pacing

	mu     sync.Mutex
	starts []bucketStart
}

type bucketStart struct {
	name string
	at   time.Duration
}

func newBucketRig(t *testing.T, capacity int) *bucketRig {
	t.Helper()
	k := &Pacing{Buckets: &pace.Buckets{}}
	return &bucketRig{rig: newRig(t, dispatch.Config{MaxSize: 16, MaxWait: 10 * time.Millisecond, Timeout: time.Minute, Pacing: k}, capacity), k: k}
}

// limitHeaders are the headers of an input-token limit of limit a minute
// with remaining left.
func limitHeaders(limit, remaining int) http.Header {
	h := http.Header{}
	h.Set("anthropic-ratelimit-input-tokens-limit", strconv.Itoa(limit))
	h.Set("anthropic-ratelimit-input-tokens-remaining", strconv.Itoa(remaining))
	return h
}

// sendAs is send for tenant.
func (r *bucketRig) sendAs(ctx context.Context, name, tenant, key string, input int, d time.Duration, h http.Header) <-chan outcome {
	return r.sendDesc(ctx, name, &request.Descriptor{Tenant: tenant, Key: key, Cost: request.Cost{InputTokens: input, MaxTokens: 10}}, input, d, h)
}

// send starts a request on key costing input tokens; its function records
// its start, answers after d with h (when set) and reports usage.
func (r *bucketRig) send(ctx context.Context, name, key string, input int, d time.Duration, h http.Header) <-chan outcome {
	return r.sendDesc(ctx, name, &request.Descriptor{Key: key, Cost: request.Cost{InputTokens: input, MaxTokens: 10}}, input, d, h)
}

// sendDesc is send for the request desc describes.
func (r *bucketRig) sendDesc(ctx context.Context, name string, desc *request.Descriptor, input int, d time.Duration, h http.Header) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		err := r.s.Do(ctx, desc, func(ctx context.Context, m *dispatch.Member) error {
			r.mu.Lock()
			r.starts = append(r.starts, bucketStart{name, r.since()})
			r.mu.Unlock()
			time.Sleep(d)
			if h != nil {
				m.Settle(200, h)
			}
			m.Used(dispatch.Usage{Input: input, Output: 10})
			return nil
		})
		out <- outcome{err, r.since()}
	}()
	synctest.Wait()
	return out
}

func (r *bucketRig) wantStarts(t *testing.T, want ...bucketStart) {
	t.Helper()
	r.mu.Lock()
	got := append([]bucketStart(nil), r.starts...)
	r.mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("started %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("start %d: %v; want %v", i, got[i], want[i])
		}
	}
}

// A key whose bucket is spent holds its own requests, outside the gate and
// in their order, each until its cost has refilled, while another key's
// requests go at once.
func TestBucketsHoldASpentKeyAloneAndInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBucketRig(t, 8)
		ctx := context.Background()
		// The first answer on key a says: a limit of 60,000 a minute
		// (1,000 a second), about 10,000 left.
		first := r.send(ctx, "a0", "a", 1000, 10*time.Millisecond, limitHeaders(60000, 10000))
		wantOutcome(t, "a0", first, nil, 20*time.Millisecond)
		// a1 (10,000) fits; a2 (3,000) does not until 3 s on; a3 (500)
		// would fit before that but must not overtake a2.
		a1 := r.send(ctx, "a1", "a", 10000, time.Millisecond, nil)
		a2 := r.send(ctx, "a2", "a", 3000, time.Millisecond, nil)
		a3 := r.send(ctx, "a3", "a", 500, time.Millisecond, nil)
		b1 := r.send(ctx, "b1", "b", 50000, time.Millisecond, nil)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if st := r.gate.Stats(); st.InFlight != 0 || st.Waiting != 0 {
			t.Errorf("gate while a's members are held: %+v; want them outside it", st)
		}
		for _, o := range []<-chan outcome{a1, a2, a3, b1} {
			<-o
		}
		// The window closes at 30 ms (10 ms after a1 joined); a1 and b1
		// go then, in an order the runtime picks.
		r.mu.Lock()
		if r.starts[1].name == "b1" {
			r.starts[1], r.starts[2] = r.starts[2], r.starts[1]
		}
		r.mu.Unlock()
		r.wantStarts(t,
			bucketStart{"a0", 10 * time.Millisecond},
			bucketStart{"a1", 30 * time.Millisecond},
			bucketStart{"b1", 30 * time.Millisecond},
			// 10,000 at 20 ms, 10,010 at 30 ms: 10 left once a1 is
			// debited; a2 needs 2,990 more, 2.99 s of refill, and a3
			// then 500 more, 0.5 s.
			bucketStart{"a2", 3020 * time.Millisecond},
			bucketStart{"a3", 3520 * time.Millisecond},
		)
	})
}

// A 429 holds its key for its retry-after; the other key keeps going.
func TestA429HoldsOnlyItsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBucketRig(t, 8)
		ctx := context.Background()
		h := http.Header{"Retry-After": {"3"}}
		got := make(chan struct{})
		go func() {
			defer close(got)
			r.s.Do(ctx, &request.Descriptor{Key: "a"}, func(ctx context.Context, m *dispatch.Member) error {
				m.Settle(http.StatusTooManyRequests, h)
				return nil
			})
		}()
		<-got
		start := r.since() // when the 429 came
		a := r.send(ctx, "a", "a", 1, 0, nil)
		b := r.send(ctx, "b", "b", 1, 0, nil)
		<-a
		<-b
		r.wantStarts(t,
			bucketStart{"b", start + 10*time.Millisecond},
			bucketStart{"a", start + 3*time.Second}, // its retry-after, counted from the 429
		)
	})
}

// A held member costs no goroutine, and one that leaves is dropped.
func TestBucketHeldMembersHoldNoGoroutineAndMayLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBucketRig(t, 8)
		ctx := context.Background()
		<-r.send(ctx, "first", "a", 1, 0, limitHeaders(6000, 1)) // 100 a second, 1 left
		base := runtime.NumGoroutine()
		leaveCtx, leave := context.WithCancel(ctx)
		var outs []<-chan outcome
		for i := range 50 {
			c := ctx
			if i == 0 {
				c = leaveCtx
			}
			outs = append(outs, r.send(c, "m"+strconv.Itoa(i), "a", 100, 0, nil))
		}
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		// Each waiting Do is a goroutine of the test's own; a held member
		// adds none of the scheduler's.
		if n := runtime.NumGoroutine() - base; n > 50 {
			t.Errorf("%d goroutines for 50 held members; want no more than their callers", n)
		}
		leave()
		if o := <-outs[0]; o.err == nil {
			t.Error("the member whose client left was served")
		}
		if r.k.Holds(&request.Descriptor{Key: "b"}) {
			t.Error("key b is held by key a's line")
		}
		if !r.k.Holds(&request.Descriptor{Key: "a", Cost: request.Cost{InputTokens: 1}}) {
			t.Error("key a's line does not hold a new request")
		}
		for _, o := range outs[1:] {
			if o := <-o; o.err != nil {
				t.Errorf("held member: %v", o.err)
			}
		}
		r.mu.Lock()
		n := len(r.starts)
		r.mu.Unlock()
		if n != 50 {
			t.Errorf("%d started; want 50 (the first and the 49 that stayed)", n)
		}
	})
}

// A member whose deadline passes while held leaves with dispatch.ErrDeadline, and
// its debit, never taken, holds nobody behind it.
func TestABucketHeldMemberHonoursItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &Pacing{Buckets: &pace.Buckets{}}
		r := &bucketRig{rig: newRig(t, dispatch.Config{MaxSize: 1, Timeout: time.Second, Pacing: k}, 8), k: k}
		ctx := context.Background()
		<-r.send(ctx, "first", "a", 1, 0, limitHeaders(600, 1)) // 10 a second, 1 left (exact: not a round thousand)
		big := r.send(ctx, "big", "a", 500, 0, nil)             // 50 s of refill: past its 1 s deadline
		if o := <-big; o.err != dispatch.ErrDeadline {
			t.Errorf("held past its deadline: %v; want dispatch.ErrDeadline", o.err)
		}
		small := r.send(ctx, "small", "a", 1, 0, nil)
		if o := <-small; o.err != nil {
			t.Errorf("the next request: %v", o.err)
		}
	})
}

// Under one key, tenants take turns: b's one request, arriving after a's
// burst, goes after at most one more of a's, not after all of them; and
// each tenant's requests keep their order.
func TestBucketsKeyLineTakesTenantsInTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newBucketRig(t, 16)
		ctx := context.Background()
		// 600 a minute, 10 a second, 1 left (not a round thousand: exact).
		<-r.sendAs(ctx, "first", "a", "k", 1, 0, limitHeaders(600, 1))
		var outs []<-chan outcome
		for i := range 6 {
			outs = append(outs, r.sendAs(ctx, "a"+strconv.Itoa(i), "a", "k", 10, 0, nil))
		}
		outs = append(outs, r.sendAs(ctx, "b0", "b", "k", 10, 0, nil))
		for _, o := range outs {
			<-o
		}
		r.mu.Lock()
		var names []string
		for _, st := range r.starts[1:] {
			names = append(names, st.name)
		}
		r.mu.Unlock()
		b := slices.Index(names, "b0")
		if b < 0 || b > 2 {
			t.Errorf("started %v; want b0 within a turn of a's held requests, not after all six", names)
		}
		a := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == "b0" })
		if !slices.IsSorted(a) {
			t.Errorf("a's requests started %v; want their arrival order", a)
		}
	})
}
