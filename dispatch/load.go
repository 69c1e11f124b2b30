package dispatch

import (
	"sync/atomic"
	"time"
)

// Load is the scheduler as an admission sees it when a request arrives.
// What it reports is kept by the scheduler itself, from the grants and
// releases it sees; only ExpectedWait reads the gate (its Stats, which a
// gate keeps cheap).
type Load struct {
	s     *Scheduler
	ahead int64
}

func (s *Scheduler) load(ahead int64) Load { return Load{s: s, ahead: ahead} }

// Queued is how many members wait ahead of the request: in windows, in
// released waves or for a slot. Requests arriving together are counted in
// the order they were counted in, each once, so a cap on it holds exactly.
func (l Load) Queued() int { return int(l.ahead) }

// ServiceTime is the moving average of how long a member holds its slot;
// zero until one has finished.
func (l Load) ServiceTime() time.Duration { return l.s.ServiceTime() }

// ExpectedWait estimates how long the request would wait for a slot: with
// FIFO slots turning over every ServiceTime, the members ahead of it beyond
// the free slots drain at capacity per ServiceTime.
func (l Load) ExpectedWait() time.Duration {
	svc := int64(l.s.ServiceTime())
	if svc == 0 {
		return 0
	}
	st := l.s.gate.Stats()
	if st.Capacity <= 0 {
		return 0
	}
	ahead := l.ahead - int64(st.Capacity-st.InFlight)
	if ahead < 0 {
		return 0
	}
	return time.Duration((ahead + 1) * svc / int64(st.Capacity))
}

// ExpectedWait estimates how long a request arriving now would wait for a
// slot (see Load.ExpectedWait).
func (s *Scheduler) ExpectedWait() time.Duration { return s.load(s.queued.Load()).ExpectedWait() }

// ServiceTime is the moving average of how long a request holds its slot;
// zero until one has finished.
func (s *Scheduler) ServiceTime() time.Duration { return time.Duration(s.service.avg.Load()) }

// serviceTime is a moving average of slot-hold times, in nanoseconds: the
// turnover rate of the gate.
type serviceTime struct{ avg atomic.Int64 }

// observe folds one slot-hold time into the average (weight 1/8: recent
// enough to follow a latency spike within a few calls, smooth enough not to
// jump on one slow stream).
func (st *serviceTime) observe(d time.Duration) {
	for {
		old := st.avg.Load()
		next := int64(d)
		if old != 0 {
			next = old + (int64(d)-old)/8
		}
		if st.avg.CompareAndSwap(old, next) {
			return
		}
	}
}
