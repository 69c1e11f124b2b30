package dispatch

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/window"
)

// startsAt is a member function that records when it began on ch, then
// takes d.
func startsAt(r *rig, ch chan<- time.Duration, d time.Duration) memberFunc {
	return func(ctx context.Context, m *Member) error {
		ch <- r.since()
		return sleepFor(d)(ctx, m)
	}
}

// A lone request with every slot free is granted at once, not after
// MaxWait; with idle release off it waits out MaxWait, as it always did.
func TestIdleReleaseLoneRequest(t *testing.T) {
	for _, on := range []bool{true, false} {
		name := map[bool]string{true: "on", false: "off"}[on]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const maxWait = 20 * time.Millisecond
				r := newRig(t, Config{MaxSize: 16, MaxWait: maxWait, Timeout: time.Minute, IdleRelease: on}, 8)
				began := make(chan time.Duration, 2)
				first := r.arrive(t.Context(), startsAt(r, began, 100*time.Millisecond))
				time.Sleep(50 * time.Millisecond) // the first is still in flight
				second := r.arrive(t.Context(), startsAt(r, began, 100*time.Millisecond))
				<-first
				<-second
				at1, at2 := <-began, <-began
				want := []flushEvent{{1, 1, window.ReasonIdle, 0}, {2, 1, window.ReasonIdle, 50 * time.Millisecond}}
				if !on {
					want = []flushEvent{{1, 1, window.ReasonAge, maxWait}, {2, 1, window.ReasonAge, 50*time.Millisecond + maxWait}}
				}
				if at1 != want[0].at || at2 != want[1].at {
					t.Errorf("calls began at %v, %v; want %v, %v", at1, at2, want[0].at, want[1].at)
				}
				if got := r.flushed(); !slices.Equal(got, want) {
					t.Errorf("flushes = %v; want %v", got, want)
				}
			})
		})
	}
}

// A burst larger than the free slots: those that find a free slot with
// nobody ahead go at once; from the first that does not, windows form as
// without idle release, closing on BATCH_MAX_SIZE or after MaxWait.
func TestIdleReleaseBurstStillFormsWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 20 * time.Millisecond
		r := newRig(t, Config{MaxSize: 3, MaxWait: maxWait, Timeout: time.Minute, IdleRelease: true}, 4)
		var outs []<-chan outcome
		for range 11 {
			outs = append(outs, r.arrive(t.Context(), sleepFor(time.Second)))
		}
		wantGate(t, r.gate, 4, 6)
		if n := r.s.Pending(); n != 1 {
			t.Errorf("Pending() = %d; want the 11th, in an open window", n)
		}
		for i, out := range outs {
			if o := <-out; o.err != nil {
				t.Errorf("member %d: %v", i, o.err)
			}
		}
		want := []flushEvent{
			{1, 1, window.ReasonIdle, 0},
			{2, 1, window.ReasonIdle, 0},
			{3, 1, window.ReasonIdle, 0},
			{4, 1, window.ReasonIdle, 0},
			{5, 3, window.ReasonSize, 0},
			{6, 3, window.ReasonSize, 0},
			{7, 1, window.ReasonAge, maxWait},
		}
		if got := r.flushed(); !slices.Equal(got, want) {
			t.Errorf("flushes = %v; want %v", got, want)
		}
	})
}

// holdAll is an admission whose rate limit is spent until a fixed time.
type holdAll struct {
	Open
	until time.Time
}

func (h holdAll) HoldUntil(*request.Descriptor) time.Time { return h.until }

// While the admission holds members back (a spent rate limit), the window
// is not closed early: its members would only wait holding their slots.
func TestIdleReleaseNotWhileHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 20 * time.Millisecond
		r := newRig(t, Config{MaxSize: 16, MaxWait: maxWait, Timeout: time.Minute, IdleRelease: true,
			Admission: holdAll{until: time.Now().Add(time.Second)}}, 8)
		<-r.arrive(t.Context(), sleepFor(time.Millisecond))
		if got, want := r.flushed(), []flushEvent{{1, 1, window.ReasonAge, maxWait}}; !slices.Equal(got, want) {
			t.Errorf("flushes = %v; want %v", got, want)
		}
	})
}
