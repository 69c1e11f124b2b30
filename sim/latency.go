package sim

import (
	"context"
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
type generation struct {
	s        *Server
	ttft     time.Duration
	perToken time.Duration
	progress time.Duration
	timer    *time.Timer
}

// newGeneration starts the generation of a request whose prompt has
// uncached input tokens to prefill (the cached rest is not prefilled
// again), jittered by its hash.
func (s *Server) newGeneration(hash uint64, uncached int) *generation {
	g := &generation{s: s, ttft: s.cfg.TTFT + time.Duration(uncached)*s.cfg.PrefillPerToken, perToken: s.cfg.PerToken}
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

// waitFor blocks until the request's progress reaches work, advancing at the
// current shared rate, or until ctx ends.
func (g *generation) waitFor(ctx context.Context, work time.Duration) error {
	for g.progress < work {
		slow := g.s.slowdown(time.Now())
		need := time.Duration(float64(work-g.progress) * slow)
		step := min(need, shareStep)
		if step <= 0 {
			g.progress = work
			break
		}
		t0 := time.Now()
		if err := g.sleep(ctx, step); err != nil {
			return err
		}
		if step == need {
			g.progress = work // the last step; avoid float rounding leftovers
			break
		}
		g.progress += time.Duration(float64(time.Since(t0)) / slow)
	}
	return nil
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
