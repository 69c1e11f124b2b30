package cacheaware

import (
	"cmp"
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/request"
)

// cacheRig is a rig whose releaser is a Release, with a record of when
// each member's function began and what the releaser made of it.
type cacheRig struct {
	*rig
	c *Release

	mu     sync.Mutex
	starts []cacheStart
}

type cacheStart struct {
	name string
	at   time.Duration
	st   Standing
}

func newCacheRig(t *testing.T, cfg dispatch.Config, capacity int, c *Release) *cacheRig {
	t.Helper()
	cfg.Releaser = c
	cfg.Learners = append(cfg.Learners, c) // it learns from the followers' reads (Used)
	return &cacheRig{rig: newRig(t, cfg, capacity), c: c}
}

// send is arrive for a request described by d, whose function first
// records its start and then runs fn.
func (r *cacheRig) send(ctx context.Context, name string, d *request.Descriptor, fn memberFunc) <-chan outcome {
	out := make(chan outcome, 1)
	go func() {
		err := r.s.Do(ctx, d, func(ctx context.Context, m *dispatch.Member) error {
			r.mu.Lock()
			r.starts = append(r.starts, cacheStart{name, r.since(), StandingOf(m)})
			r.mu.Unlock()
			return fn(ctx, m)
		})
		out <- outcome{err, r.since()}
	}()
	synctest.Wait()
	return out
}

// started is who started, in order.
func (r *cacheRig) started() []cacheStart {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cacheStart(nil), r.starts...)
}

// wantStarts checks who started, when, in which role and after what hold,
// ordered by time and then name: members let go at one instant start in
// an order the runtime picks (the order of their joins is checked with a
// single slot, in TestCacheHeldFollowerHoldsNoGoroutine).
func (r *cacheRig) wantStarts(t *testing.T, want ...cacheStart) {
	t.Helper()
	got := r.started()
	slices.SortStableFunc(got, func(a, b cacheStart) int {
		return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.name, b.name))
	})
	if len(got) != len(want) {
		t.Fatalf("started %v; want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("start %d: %+v; want %+v", i, got[i], want[i])
		}
	}
}

// shared is a request on model claude-sonnet-4-5 (minimum 1024 tokens)
// whose prefixes have the given keys, each 2000 tokens longer than the
// one before.
func shared(keys ...uint64) *request.Descriptor {
	d := &request.Descriptor{Model: "claude-sonnet-4-5", Stream: true}
	for i, k := range keys {
		d.Prefixes = append(d.Prefixes, request.Prefix{Key: k, Tokens: 2000 * (i + 1), TTL: 5 * time.Minute})
	}
	return d
}

// beginAfter is a leader's function: its response begins after d and
// ends after d more.
func beginAfter(d time.Duration) memberFunc {
	return func(ctx context.Context, m *dispatch.Member) error {
		time.Sleep(d)
		m.MarkBegun()
		time.Sleep(d)
		return nil
	}
}

func follower(role Role, held time.Duration, why string) Standing {
	return Standing{Role: role, Held: held, Released: why}
}

var (
	asLeader = Standing{Role: CacheLeader}
	asWarm   = Standing{Role: CacheWarm}
)

// A wave of four on one cold prefix: the leader goes at once, the others
// wait outside the gate (no slot, though slots are free) until its
// response begins, and then go in arrival order. A request arriving
// afterwards, in a later wave, finds the prefix warm and goes at once;
// once its TTL has passed unrefreshed, the next request leads again.
func TestCacheFollowersWaitForLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCacheRig(t, dispatch.Config{MaxSize: 4, MaxWait: time.Hour, Timeout: time.Minute}, 4, &Release{})
		var outs []<-chan outcome
		for _, name := range []string{"leader", "f1", "f2", "f3"} {
			fn := sleepFor(2 * time.Second)
			if name == "leader" {
				fn = beginAfter(time.Second)
			}
			outs = append(outs, r.send(t.Context(), name, shared(7), fn))
		}
		if n := r.gate.joins.Load(); n != 1 {
			t.Errorf("gate joins at the flush = %d; want 1, the leader", n)
		}
		if q := r.s.Queued(); q != 3 {
			t.Errorf("queued = %d; want the 3 held followers", q)
		}
		if n := r.c.Held(); n != 3 {
			t.Errorf("Held() = %d; want the 3 followers", n)
		}
		for _, o := range outs {
			<-o
		}
		if n := r.c.Held(); n != 0 {
			t.Errorf("Held() = %d once all are served; want 0", n)
		}
		r.send(t.Context(), "warm", shared(7), sleepFor(time.Second))
		r.s.Flush()
		time.Sleep(6 * time.Minute)
		r.send(t.Context(), "cold again", shared(7), sleepFor(time.Second))
		r.s.Flush()
		synctest.Wait()
		r.wantStarts(t,
			cacheStart{"leader", 0, asLeader},
			cacheStart{"f1", time.Second, follower(CacheFollower, time.Second, ReleasedBegun)},
			cacheStart{"f2", time.Second, follower(CacheFollower, time.Second, ReleasedBegun)},
			cacheStart{"f3", time.Second, follower(CacheFollower, time.Second, ReleasedBegun)},
			cacheStart{"warm", 3 * time.Second, asWarm},
			cacheStart{"cold again", 3*time.Second + 6*time.Minute, asLeader},
		)
	})
}

// Requests in later waves follow a leader still in flight; a warm hit
// refreshes the prefix's TTL.
func TestCacheLaterWavesFollow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: time.Minute}, 4, &Release{})
		r.send(t.Context(), "leader", shared(1), beginAfter(time.Second))
		time.Sleep(300 * time.Millisecond)
		r.send(t.Context(), "later", shared(1), sleepFor(time.Second))
		time.Sleep(4 * time.Minute)
		r.send(t.Context(), "warm", shared(1), sleepFor(time.Second))
		time.Sleep(4 * time.Minute) // 8 minutes after the leader began, 4 after the hit
		r.send(t.Context(), "refreshed", shared(1), sleepFor(time.Second))
		t0 := 300*time.Millisecond + 4*time.Minute
		r.wantStarts(t,
			cacheStart{"leader", 0, asLeader},
			cacheStart{"later", time.Second, follower(CacheFollower, 700*time.Millisecond, ReleasedBegun)},
			cacheStart{"warm", t0, asWarm},
			cacheStart{"refreshed", t0 + 4*time.Minute, asWarm},
		)
	})
}

// A leader that fails, or whose client leaves, promotes the next live
// follower, which leads from then on; the others keep waiting for it.
func TestCacheLeaderEndPromotesNext(t *testing.T) {
	for _, how := range []string{"fails", "departs"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: time.Minute}, 4, &Release{})
				ctx, leave := context.WithCancel(t.Context())
				errUpstream := errors.New("upstream failed")
				leader := r.send(ctx, "leader", shared(1), func(ctx context.Context, m *dispatch.Member) error {
					select {
					case <-time.After(time.Second):
						return errUpstream
					case <-ctx.Done():
						return ctx.Err()
					}
				})
				gone, cancelGone := context.WithCancel(t.Context())
				r.send(gone, "gone", shared(1), mustNotRun(t, "departed follower"))
				r.send(t.Context(), "f1", shared(1), beginAfter(time.Second))
				r.send(t.Context(), "f2", shared(1), sleepFor(time.Second))
				cancelGone() // a departed follower is never promoted
				time.Sleep(500 * time.Millisecond)
				if how == "departs" {
					leave()
				}
				<-leader
				time.Sleep(3 * time.Second)
				promoted := time.Second
				if how == "departs" {
					promoted = 500 * time.Millisecond
				}
				r.wantStarts(t,
					cacheStart{"leader", 0, asLeader},
					cacheStart{"f1", promoted, follower(CacheLeader, promoted, ReleasedPromoted)},
					cacheStart{"f2", promoted + time.Second, follower(CacheFollower, promoted+time.Second, ReleasedBegun)},
				)
				leave()
			})
		})
	}
}

// No follower is held past the leader wait, nor so long that less than
// the wait is left of its wave deadline or its client's patience: it then
// goes uncached, without its leader.
func TestCacheHoldBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = 2 * time.Second
		r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: 10 * time.Second}, 8, &Release{LeaderWait: wait})
		r.send(t.Context(), "slow leader", shared(1), beginAfter(9*time.Second))
		r.send(t.Context(), "bound", shared(1), sleepFor(time.Second))
		impatient := shared(1)
		impatient.Patience = wait + 500*time.Millisecond
		r.send(t.Context(), "impatient", impatient, sleepFor(time.Second))
		hurried := shared(1)
		hurried.Patience = wait // no time to wait at all
		r.send(t.Context(), "hurried", hurried, sleepFor(time.Second))
		time.Sleep(3 * time.Second)
		r.wantStarts(t,
			cacheStart{"hurried", 0, follower(CacheFollower, 0, ReleasedBound)},
			cacheStart{"slow leader", 0, asLeader},
			cacheStart{"impatient", 500 * time.Millisecond, follower(CacheFollower, 500*time.Millisecond, ReleasedBound)},
			cacheStart{"bound", wait, follower(CacheFollower, wait, ReleasedBound)},
		)
		time.Sleep(20 * time.Second) // the leader's call ends
	})
	synctest.Test(t, func(t *testing.T) {
		// A short wave deadline: held until the wait is left of it.
		r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: 3 * time.Second}, 8, &Release{LeaderWait: 2 * time.Second})
		r.send(t.Context(), "slow leader", shared(1), beginAfter(2*time.Second))
		r.send(t.Context(), "short deadline", shared(1), sleepFor(time.Second))
		time.Sleep(5 * time.Second)
		r.wantStarts(t,
			cacheStart{"slow leader", 0, asLeader},
			cacheStart{"short deadline", time.Second, follower(CacheFollower, time.Second, ReleasedBound)},
		)
	})
}

// Requests whose prefixes are below their model's minimum, or that have
// none, go at once, as by InOrder, even with a leader on the same key in
// flight.
func TestCacheBelowMinimumUntouched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: time.Minute}, 8, &Release{})
		r.send(t.Context(), "leader", shared(1), beginAfter(time.Second))
		short := shared(1)
		short.Prefixes[0].Tokens = 1000 // claude-sonnet-4-5 caches from 1024
		r.send(t.Context(), "short", short, sleepFor(time.Second))
		haiku := shared(1)
		haiku.Model = "claude-haiku-4-5" // 2000 tokens is below its 4096
		r.send(t.Context(), "haiku", haiku, sleepFor(time.Second))
		r.send(t.Context(), "none", &request.Descriptor{Model: "claude-sonnet-4-5"}, sleepFor(time.Second))
		r.send(t.Context(), "nil", nil, sleepFor(time.Second))
		time.Sleep(3 * time.Second)
		r.wantStarts(t,
			cacheStart{"haiku", 0, Standing{}},
			cacheStart{"leader", 0, asLeader},
			cacheStart{"nil", 0, Standing{}},
			cacheStart{"none", 0, Standing{}},
			cacheStart{"short", 0, Standing{}},
		)
		if n := r.c.Len(); n != 1 {
			t.Errorf("registry holds %d prefixes; want 1", n)
		}
	})
}

// Sessions that share a system prompt but end in their own messages
// follow on the system prompt, the longest prefix the registry knows; the
// follower then leads its own longer prefix, which a later request
// repeating it follows.
func TestCacheFollowsLongestKnownPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: time.Minute}, 8, &Release{})
		const system = 100
		r.send(t.Context(), "session A", shared(system, 1), beginAfter(time.Second))
		r.send(t.Context(), "session B", shared(system, 2), beginAfter(time.Second))
		time.Sleep(1500 * time.Millisecond)
		r.send(t.Context(), "B again", shared(system, 2), sleepFor(time.Second))
		time.Sleep(3 * time.Second)
		r.wantStarts(t,
			cacheStart{"session A", 0, asLeader},
			cacheStart{"session B", time.Second, follower(CacheFollower, time.Second, ReleasedBegun)},
			cacheStart{"B again", 2 * time.Second, follower(CacheFollower, 500*time.Millisecond, ReleasedBegun)},
		)
	})
}

// The registry holds at most MaxPrefixes: the least recently used goes,
// and its held followers go with it, at once.
func TestCacheRegistryBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: time.Minute}, 8, &Release{MaxPrefixes: 2})
		r.send(t.Context(), "leader 1", shared(1), beginAfter(time.Second))
		r.send(t.Context(), "follower 1", shared(1), sleepFor(time.Second))
		r.send(t.Context(), "leader 2", shared(2), beginAfter(time.Second))
		time.Sleep(100 * time.Millisecond)
		r.send(t.Context(), "leader 3", shared(3), beginAfter(time.Second))
		if n := r.c.Len(); n != 2 {
			t.Errorf("registry holds %d prefixes; want 2", n)
		}
		time.Sleep(3 * time.Second)
		r.wantStarts(t,
			cacheStart{"leader 1", 0, asLeader},
			cacheStart{"leader 2", 0, asLeader},
			cacheStart{"follower 1", 100 * time.Millisecond, follower(CacheFollower, 100*time.Millisecond, ReleasedEvicted)},
			cacheStart{"leader 3", 100 * time.Millisecond, asLeader},
		)
	})
}

// A held follower costs no goroutine: a thousand of them, waiting for
// one leader, leave the goroutine count where it was; and once the leader
// begins they are all served, in order, and Grouped heard of one group.
func TestCacheHeldFollowerHoldsNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var groups int
		r := newCacheRig(t, dispatch.Config{MaxSize: 100, MaxWait: time.Millisecond, Timeout: time.Minute}, 1,
			&Release{Grouped: func() { groups++ }})
		r.send(t.Context(), "leader", shared(1), beginAfter(time.Second))
		time.Sleep(10 * time.Millisecond)
		before := runtime.NumGoroutine()
		const n = 1000
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			err := r.s.Start(t.Context(), shared(1), func(ctx context.Context, m *dispatch.Member) error {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				return nil
			}, func(error) { wg.Done() })
			if err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(10 * time.Millisecond)
		if got := runtime.NumGoroutine(); got > before+2 {
			t.Errorf("%d goroutines with %d followers held; want about %d, as before", got, n, before)
		}
		if q := r.s.Queued(); q != n {
			t.Errorf("queued = %d; want %d held", q, n)
		}
		wg.Wait()
		if len(order) != n {
			t.Fatalf("%d served; want %d", len(order), n)
		}
		for i, v := range order {
			if v != i {
				t.Fatalf("served %d at %d; want arrival order", v, i)
			}
		}
		if groups != 1 {
			t.Errorf("Grouped called %d times; want 1", groups)
		}
	})
}

// A request whose shorter prefix is warm and whose longer one is new
// reads the shorter and writes the rest: the pacing counts as cached only
// the warm prefix's tokens, not its longest prefix's (which it writes,
// and which the input limit counts).
func TestCachedTokensAreTheWarmPrefixOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: time.Minute}, 4, &Release{})
		<-r.send(t.Context(), "leader of one", shared(7), beginAfter(time.Second))
		<-r.send(t.Context(), "leader of both", shared(5, 6), beginAfter(time.Second))
		var got []int
		record := func(_ context.Context, m *dispatch.Member) error {
			got = append(got, m.ExpectedRead())
			return nil
		}
		<-r.send(t.Context(), "warm, then a new turn", shared(7, 8), record)
		<-r.send(t.Context(), "the whole of it warm", shared(5, 6), record)
		if want := []int{2000, 4000}; !slices.Equal(got, want) {
			t.Errorf("cached tokens %v; want %v (the warm prefix's: 2000 of 4000, then all 4000)", got, want)
		}
	})
}

// coldRouting routes every member to one key, saying whether it is cold
// there.
type coldRouting struct{ cold bool }

func (c coldRouting) Route(*dispatch.Member) dispatch.Routed {
	return dispatch.Routed{Key: "k", Cold: c.cold}
}
func (coldRouting) End(*dispatch.Member) {}

// A request whose routing says its key holds none of its prefixes is
// counted as reading nothing from the cache, though the cache-aware
// release found its prefix warm (its registry is one for every key).
func TestColdKeyCountsNothingCached(t *testing.T) {
	for _, cold := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: time.Minute, Routing: coldRouting{cold}}, 4, &Release{})
			<-r.send(t.Context(), "leader", shared(7), beginAfter(time.Second))
			var got int
			<-r.send(t.Context(), "warm", shared(7), func(_ context.Context, m *dispatch.Member) error {
				got = m.ExpectedRead()
				return nil
			})
			if want := map[bool]int{false: 2000, true: 0}[cold]; got != want {
				t.Errorf("cold=%v: %d cached tokens; want %d", cold, got, want)
			}
		})
	}
}

// turnBody is a conversation's body: a 2,400-token system prompt and the
// given messages, the last one's block a breakpoint.
func turnBody(t *testing.T, messages ...string) *request.Descriptor {
	t.Helper()
	var ms []string
	for i, m := range messages {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		cc := ""
		if i == len(messages)-1 {
			cc = `,"cache_control":{"type":"ephemeral"}`
		}
		ms = append(ms, `{"role":"`+role+`","content":[{"type":"text","text":"`+m+`"`+cc+`}]}`)
	}
	body := `{"model":"claude-sonnet-4-5","max_tokens":50,"stream":true,"system":[{"type":"text","text":"` +
		strings.Repeat("rule ", 1920) + `"}],"messages":[` + strings.Join(ms, ",") + `]}`
	d, err := request.Parse([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	return &d
}

// A conversation's next turn, whose one breakpoint rolled two blocks past
// the last turn's, reads the entry the last turn wrote, as the API's
// lookback finds it: warm once that turn's answer began, followed while it
// is in flight. A turn 20 block boundaries on is out of the window and
// leads its own prefix. Before the lookback each was a leader.
func TestCacheNextTurnFindsLastTurnByLookback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCacheRig(t, dispatch.Config{MaxSize: 1, Timeout: time.Minute}, 8, &Release{})
		far := []string{"Read the README."}
		for i := range 20 {
			far = append(far, "step "+strings.Repeat("x", i))
		}
		r.send(t.Context(), "A turn 1", turnBody(t, "Read the README."), beginAfter(time.Second))
		r.send(t.Context(), "B turn 2", turnBody(t, "Read the README.", "It says hi.", "Go on."), sleepFor(time.Second))
		time.Sleep(3 * time.Second)
		r.send(t.Context(), "A turn 2", turnBody(t, "Read the README.", "It says hello.", "Summarise it."), sleepFor(time.Second))
		r.send(t.Context(), "A turn 21", turnBody(t, far...), sleepFor(time.Second))
		time.Sleep(2 * time.Second)
		r.wantStarts(t,
			cacheStart{"A turn 1", 0, asLeader},
			cacheStart{"B turn 2", time.Second, follower(CacheFollower, time.Second, ReleasedBegun)},
			cacheStart{"A turn 2", 3 * time.Second, asWarm},
			cacheStart{"A turn 21", 3 * time.Second, asLeader},
		)
	})
}
