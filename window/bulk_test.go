package window

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// The bulk path's windows: thousands of items, a byte threshold, minutes
// of age, and withdrawals from the middle.

func TestFlushOnBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, r := newWindow(t, 100, time.Hour)
		w.SetMaxBytes(100)
		if _, err := w.AddSized(1, 40); err != nil {
			t.Fatal(err)
		}
		w.AddSized(2, 50)
		wantWaves(t, r)
		// 40+50+20 would pass 100: the open wave closes first, and 3 opens
		// the next.
		next, _ := w.AddSized(3, 20)
		wantWaves(t, r, flushed{id: 1, items: []int{1, 2}, reason: ReasonBytes})
		if next.ID != 2 {
			t.Errorf("the item that would pass the threshold joined wave %d; want the next, 2", next.ID)
		}
		// Reaching the threshold exactly closes at once.
		w.AddSized(4, 80)
		wantWaves(t, r, flushed{id: 1, items: []int{1, 2}, reason: ReasonBytes},
			flushed{id: 2, items: []int{3, 4}, reason: ReasonBytes})
		// An item larger than the threshold goes alone.
		w.AddSized(5, 10)
		w.AddSized(6, 500)
		wantWaves(t, r, flushed{id: 1, items: []int{1, 2}, reason: ReasonBytes},
			flushed{id: 2, items: []int{3, 4}, reason: ReasonBytes},
			flushed{id: 3, items: []int{5}, reason: ReasonBytes},
			flushed{id: 4, items: []int{6}, reason: ReasonBytes})
	})
}

func TestWithdrawGivesBytesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, n := range []int{3, 1000} { // below and above indexFrom
			w, r := newWindow(t, 10_000, time.Hour)
			w.SetMaxBytes(int64(n) * 10)
			for i := range n - 1 {
				w.AddSized(i, 10)
			}
			if !w.Withdraw(0) {
				t.Fatalf("n=%d: Withdraw(0) = false on an open item", n)
			}
			// Two more of 10 fit only because the withdrawn item gave its
			// bytes back; the second reaches the threshold.
			w.AddSized(n, 10)
			if got := len(r.got()); got != 0 {
				t.Fatalf("n=%d: flushed %d waves before the threshold was reached", n, got)
			}
			w.AddSized(n+1, 10)
			got := r.got()
			if len(got) != 1 || got[0].reason != ReasonBytes || len(got[0].items) != n {
				t.Fatalf("n=%d: waves %v; want one of %d items closed on bytes", n, got, n)
			}
		}
	})
}

func TestLargeWindowWithdrawKeepsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 10_000
		w, r := newWindow(t, 100_000, 5*time.Minute)
		for i := range n {
			add(t, w, i)
		}
		var want []int
		for i := range n {
			if i%3 == 0 {
				if !w.Withdraw(i) {
					t.Fatalf("Withdraw(%d) = false", i)
				}
				continue
			}
			want = append(want, i)
		}
		if w.Withdraw(0) {
			t.Error("Withdraw of an item already withdrawn = true")
		}
		if got := w.Pending(); got != len(want) {
			t.Errorf("Pending() = %d; want %d", got, len(want))
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		got := r.got()
		if len(got) != 1 || got[0].reason != ReasonAge || !slices.Equal(got[0].items, want) {
			t.Fatalf("flushed %d waves; want one on age with the kept items in arrival order", len(got))
		}
		w.Close()
	})
}

// A window of the Batches API's 100,000 requests must not allocate room
// for them all when it opens: a few items must cost a few items' memory.
func TestNoPreallocationOfMaxSize(t *testing.T) {
	w, _ := newWindow(t, 100_000, time.Hour)
	defer w.Close()
	wave := add(t, w, 1)
	if c := cap(wave.Items); c > indexFrom {
		t.Errorf("a window of max size 100000 holding 1 item has capacity %d; want at most %d", c, indexFrom)
	}
}

// Withdraw must not scan a large window: 50,000 withdrawals from a window
// of 50,000 are O(n) in all. A linear scan would take ~10⁹ comparisons;
// this bound is generous enough for the race detector.
func TestWithdrawIsConstantTime(t *testing.T) {
	const n = 50_000
	w, _ := newWindow(t, 100_000, time.Hour)
	defer w.Close()
	for i := range n {
		add(t, w, i)
	}
	start := time.Now()
	for i := n - 1; i >= 0; i-- { // from the back: the worst case of a scan from the front
		if !w.Withdraw(i) {
			t.Fatalf("Withdraw(%d) = false", i)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%d withdrawals took %v; want well under 2s (O(1) each)", n, d)
	}
	if w.Pending() != 0 {
		t.Errorf("Pending() = %d after withdrawing all; want 0", w.Pending())
	}
}
