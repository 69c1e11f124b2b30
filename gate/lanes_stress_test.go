package gate_test

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
)

// stressLanes runs n tickets at once through g, each of a lane from 0
// (none) to lanes, each leaving, declining or releasing in its own order
// (hostile picks the orders the contract allows but a polite holder would
// not use: Release while still waiting, Release then Leave, twice each),
// and then checks that every lane and the gate behind end empty.
func stressLanes(t *testing.T, hostile bool) {
	const lanes, n = 3, 4000
	all := mustLocal(t, 4)
	var ls []gate.Gate
	for i := 0; i < lanes; i++ {
		ls = append(ls, mustLocal(t, 1+i))
	}
	g := gate.NewLanes(all, ls)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			tk := &gate.Ticket{Lane: i % (lanes + 1)}
			mode := r.IntN(3)
			if !hostile && mode == 1 {
				mode = 0
			}
			switch mode {
			case 0: // wait a little, then use the slot or leave
				g.Join(tk)
				select {
				case <-tk.Ready():
					if r.IntN(2) == 0 {
						g.Release(tk, gate.Outcome{End: gate.EndOK})
					}
					g.Leave(tk)
				case <-time.After(time.Duration(r.IntN(50)) * time.Microsecond):
					g.Leave(tk)
				}
				g.Release(tk, gate.Outcome{End: gate.EndOK}) // a deferred Release: harmless
			case 1: // a Release while it may still wait, then wait and leave
				g.Join(tk)
				g.Release(tk, gate.Outcome{End: gate.EndOK})
				select {
				case <-tk.Ready():
				case <-time.After(time.Duration(r.IntN(50)) * time.Microsecond):
				}
				g.Leave(tk)
				g.Release(tk, gate.Outcome{End: gate.EndOK})
			case 2: // a holder without a goroutine: it gives up, racing its grant
				var gaveUp atomic.Bool
				got := make(chan struct{})
				tk.OnGrant(func() bool {
					if gaveUp.Load() {
						return false
					}
					close(got)
					return true
				})
				g.Join(tk)
				select {
				case <-got:
					g.Release(tk, gate.Outcome{End: gate.EndOK})
				case <-time.After(time.Duration(r.IntN(50)) * time.Microsecond):
					gaveUp.Store(true)
					g.Leave(tk)
				}
			}
		}(i)
	}
	wg.Wait()
	// A ticket declined from the line behind gives its lane slot back on
	// a goroutine of its own: give those a moment.
	deadline := time.Now().Add(5 * time.Second)
	for {
		empty := all.Stats().InFlight == 0 && all.Stats().Waiting == 0
		for i := 1; i <= lanes; i++ {
			s := g.Lane(i).Stats()
			empty = empty && s.InFlight == 0 && s.Waiting == 0
		}
		if empty {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	t.Errorf("behind at the end: %+v; want empty", all.Stats())
	for i := 1; i <= lanes; i++ {
		t.Errorf("lane %d at the end: %+v", i, g.Lane(i).Stats())
	}
}

// TestLanesStressEndsEmpty: many holders joining, leaving, declining and
// releasing at once leave no slot held and no ticket waiting, in any lane
// or behind.
func TestLanesStressEndsEmpty(t *testing.T) { stressLanes(t, false) }

// TestLanesReleaseWhileWaitingDoesNothing: Release of a ticket that holds
// no slot does nothing (the Gate contract: a deferred Release is always
// safe), also through a lane; under load, with all the rest going on.
func TestLanesReleaseWhileWaitingDoesNothing(t *testing.T) { stressLanes(t, true) }
