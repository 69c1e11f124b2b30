package dispatch

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/request"
)

// TestShortestFirstOrdersAWave sends a wave of four requests of different
// costs to a gate of one slot: they are served cheapest first, the two of
// equal cost in arrival order.
func TestShortestFirstOrdersAWave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, Config{MaxSize: 4, MaxWait: time.Hour, Timeout: time.Minute, Releaser: ShortestFirst{}}, 1)
		var mu sync.Mutex
		var order []string
		done := make(chan error, 4)
		for _, c := range []struct {
			name string
			cost int
		}{{"long", 9000}, {"short", 100}, {"mid-a", 2000}, {"mid-b", 2000}} {
			req := &request.Descriptor{Cost: request.Cost{MaxTokens: c.cost}}
			go func() {
				done <- r.s.Do(context.Background(), req, func(context.Context, *Member) error {
					mu.Lock()
					order = append(order, c.name)
					mu.Unlock()
					time.Sleep(time.Second)
					return nil
				})
			}()
			synctest.Wait() // arrival order is the order above
		}
		for range 4 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		want := []string{"short", "mid-a", "mid-b", "long"}
		if len(order) != len(want) {
			t.Fatalf("served %v; want %v", order, want)
		}
		for i := range want {
			if order[i] != want[i] {
				t.Fatalf("served %v; want %v", order, want)
			}
		}
	})
}

// Chained after another releaser, it orders the members that one puts in
// line together, and passes a member put in line later on at once.
func TestShortestFirstInAChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := &holdOne{}
		r := newRig(t, Config{MaxSize: 3, MaxWait: time.Hour, Timeout: time.Minute, Releaser: Releasers{first, ShortestFirst{}}}, 1)
		var mu sync.Mutex
		var order []int
		done := make(chan error, 3)
		for i, cost := range []int{50, 9000, 100} { // the first, the cheapest, is kept by holdOne
			req := &request.Descriptor{Cost: request.Cost{MaxTokens: cost}}
			go func() {
				done <- r.s.Do(context.Background(), req, func(context.Context, *Member) error {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					time.Sleep(time.Second)
					return nil
				})
			}()
			synctest.Wait()
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		first.mu.Lock()
		first.kept[0]()
		first.mu.Unlock()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if want := []int{2, 1, 0}; len(order) != 3 || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
			t.Fatalf("served %v; want %v: the two joined together cheapest first, the kept one after", order, want)
		}
	})
}
