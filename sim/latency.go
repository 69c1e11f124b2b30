package sim

import (
	"context"
	"math"
	"sync"
	"time"
)

// shareStep bounds how long a request sleeps before it looks again at how
// many others share the capacity, so a change in load takes effect within
// this much time. Smaller is more exact and costs more wake-ups.
const shareStep = 10 * time.Millisecond

// capacity counts requests in generation. With slots > 0 it implements
// processor sharing: n requests in flight each progress at slots/n of full
// speed once n > slots.
type capacity struct {
	slots int

	mu       sync.Mutex
	inflight int
	peak     int
}

// enter admits a request unless overloadAt (> 0) requests are already in
// flight, in which case it reports false.
func (c *capacity) enter(overloadAt int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if overloadAt > 0 && c.inflight >= overloadAt {
		return false
	}
	c.inflight++
	c.peak = max(c.peak, c.inflight)
	return true
}

func (c *capacity) leave() {
	c.mu.Lock()
	c.inflight--
	c.mu.Unlock()
}

func (c *capacity) load() (inflight, peak int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight, c.peak
}

func (c *capacity) resetPeak() {
	c.mu.Lock()
	c.peak = c.inflight
	c.mu.Unlock()
}

// capacityAt is the generation slots and the 529 threshold at now: the
// last capacity step begun, else Capacity and OverloadAt.
func (s *Server) capacityAt(now time.Time) (slots, overloadAt int) {
	slots, overloadAt = s.capacity.slots, s.cfg.OverloadAt
	since := now.Sub(s.start)
	for _, st := range s.cfg.CapacitySteps {
		if since < st.From {
			break
		}
		slots, overloadAt = st.Capacity, st.OverloadAt
	}
	return slots, overloadAt
}

// slowdown is how many times slower than full speed a request progresses
// now: the sharing factor max(1, n/C) times every active spike's factor.
func (s *Server) slowdown(now time.Time) float64 {
	f := 1.0
	if slots, _ := s.capacityAt(now); slots > 0 {
		n, _ := s.capacity.load()
		if n > slots {
			f = float64(n) / float64(slots)
		}
	}
	since := now.Sub(s.start)
	for _, sp := range s.cfg.Spikes {
		if since >= sp.From && since < sp.To {
			f *= sp.Factor
		}
	}
	return f
}

// generation tracks one request's progress in "work" time: the time the
// request would have taken so far had it run alone at full speed.
//
// Progress is paced against the wall clock since the generation began, not
// by adding up sleeps: each update credits all the time since the last one
// (timer overshoot, time spent writing to the client) at the rate then in
// force, so a late wake-up is made up by the next token being due sooner.
// Adding up sleeps lost every timer's overshoot; at 50µs a token that made
// 100k tokens take 28 s instead of 5 s.
type generation struct {
	s        *Server
	ttft     time.Duration
	perToken time.Duration
	progress time.Duration
	mark     time.Time // when progress was last brought up to date
	slow     float64   // the slowdown in force since mark
	timer    *time.Timer
}

// newGeneration starts the generation of a request whose prompt has
// uncached input tokens to prefill (the cached rest is not prefilled
// again), jittered by its hash. Its clock starts now.
func (s *Server) newGeneration(hash uint64, uncached int) *generation {
	now := time.Now()
	g := &generation{s: s, ttft: s.cfg.TTFT + time.Duration(uncached)*s.cfg.PrefillPerToken, perToken: s.cfg.PerToken,
		mark: now, slow: s.slowdown(now)}
	if j := s.cfg.Jitter; j > 0 {
		h := mix(uint64(s.cfg.Seed)^0x7177, hash)
		f := 1 + j*(2*unit(h)-1)
		g.ttft = time.Duration(float64(g.ttft) * f)
		g.perToken = time.Duration(float64(g.perToken) * f)
	}
	return g
}

// atToken is the work done when output token n (0-based) is ready; token 0
// is the first one, at TTFT.
func (g *generation) atToken(n int) time.Duration {
	return g.ttft + time.Duration(n)*g.perToken
}

// advance credits the wall time since mark at the slowdown in force then,
// and takes the slowdown in force from now on.
func (g *generation) advance() {
	now := time.Now()
	g.progress += time.Duration(float64(now.Sub(g.mark)) / g.slow)
	g.mark = now
	g.slow = g.s.slowdown(now)
}

// waitFor blocks until the request's progress reaches work, advancing at the
// current shared rate, or until ctx ends. Progress past work (a late
// wake-up) is kept, so the next wait is shorter by as much.
func (g *generation) waitFor(ctx context.Context, work time.Duration) error {
	for {
		g.advance()
		if g.progress >= work {
			return nil
		}
		// Round up so the wake-up is never early by a fraction of a
		// nanosecond, which would cost a wasted loop.
		need := time.Duration(math.Ceil(float64(work-g.progress) * g.slow))
		if err := g.sleep(ctx, min(need, shareStep)); err != nil {
			return err
		}
	}
}

func (g *generation) sleep(ctx context.Context, d time.Duration) error {
	if g.timer == nil {
		g.timer = time.NewTimer(d)
	} else {
		g.timer.Reset(d)
	}
	select {
	case <-g.timer.C:
		return nil
	case <-ctx.Done():
		g.timer.Stop()
		return ctx.Err()
	}
}

// pause sleeps d of wall time regardless of load, for the slow-stream fault.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
