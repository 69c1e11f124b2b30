package window

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// flushed is what a flush function saw of one wave.
type flushed struct {
	id     uint64
	items  []int
	reason Reason
	age    time.Duration // time.Since(OpenedAt) when flush ran
	open   bool          // Done was still open while flush ran
}

// recorder collects the waves a window flushes.
type recorder struct {
	mu    sync.Mutex
	waves []flushed
}

func (f flushed) String() string {
	return fmt.Sprintf("{id %d items %v reason %v age %v}", f.id, f.items, f.reason, f.age)
}

func (r *recorder) flush(w *Wave[int]) {
	f := flushed{
		id:     w.ID,
		items:  slices.Clone(w.Items),
		reason: w.Reason,
		age:    time.Since(w.OpenedAt),
	}
	select {
	case <-w.Done():
	default:
		f.open = true
	}
	r.mu.Lock()
	r.waves = append(r.waves, f)
	r.mu.Unlock()
}

func (r *recorder) got() []flushed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.waves)
}

func newWindow(t *testing.T, maxSize int, maxWait time.Duration) (*Window[int], *recorder) {
	t.Helper()
	r := new(recorder)
	w, err := New(maxSize, maxWait, r.flush)
	if err != nil {
		t.Fatalf("New(%d, %v): %v", maxSize, maxWait, err)
	}
	return w, r
}

func add(t *testing.T, w *Window[int], items ...int) *Wave[int] {
	t.Helper()
	var wave *Wave[int]
	for _, it := range items {
		var err error
		if wave, err = w.Add(it); err != nil {
			t.Fatalf("Add(%d): %v", it, err)
		}
	}
	return wave
}

func wantWaves(t *testing.T, r *recorder, want ...flushed) {
	t.Helper()
	got := r.got()
	if len(got) != len(want) {
		t.Fatalf("flushed %d waves %v; want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.id != w.id || !slices.Equal(g.items, w.items) || g.reason != w.reason || g.age != w.age {
			t.Errorf("wave %d = %v; want %v", i, g, w)
		}
		if !g.open {
			t.Errorf("wave %d: Done was closed before the flush function returned", i)
		}
	}
}

func isDone[T comparable](w *Wave[T]) bool {
	select {
	case <-w.Done():
		return true
	default:
		return false
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	nop := func(*Wave[int]) {}
	for _, tc := range []struct {
		name    string
		maxSize int
		maxWait time.Duration
		flush   func(*Wave[int])
	}{
		{"zero size", 0, time.Second, nop},
		{"negative wait", 4, -time.Millisecond, nop},
		{"nil flush", 4, time.Second, nil},
	} {
		if w, err := New(tc.maxSize, tc.maxWait, tc.flush); err == nil || w != nil {
			t.Errorf("%s: New = %v, %v; want nil and an error", tc.name, w, err)
		}
	}
}

func TestFlushOnSize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, r := newWindow(t, 3, time.Hour)
		first := add(t, w, 1, 2)
		synctest.Wait()
		wantWaves(t, r)
		if n := w.Pending(); n != 2 {
			t.Errorf("Pending() = %d; want 2", n)
		}
		last := add(t, w, 3) // fills it: flushed before Add returns
		if last != first {
			t.Error("the item that filled the window got a different wave")
		}
		wantWaves(t, r, flushed{id: 1, items: []int{1, 2, 3}, reason: ReasonSize})
		if !isDone(last) {
			t.Error("Done not closed once the wave was flushed")
		}
		if n := w.Pending(); n != 0 {
			t.Errorf("Pending() after flush = %d; want 0", n)
		}
		// The full window's timer must not fire later.
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		wantWaves(t, r, flushed{id: 1, items: []int{1, 2, 3}, reason: ReasonSize})
	})
}

func TestFlushOnAgeFromFirstItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 100 * time.Millisecond
		w, r := newWindow(t, 10, maxWait)
		wave := add(t, w, 1)
		time.Sleep(60 * time.Millisecond)
		add(t, w, 2) // later arrivals do not push the close back
		time.Sleep(39 * time.Millisecond)
		add(t, w, 3)
		synctest.Wait()
		wantWaves(t, r)
		<-wave.Done()
		if d := wave.ClosedAt.Sub(wave.OpenedAt); d != maxWait {
			t.Errorf("wave closed %v after its first item; want %v", d, maxWait)
		}
		wantWaves(t, r, flushed{id: 1, items: []int{1, 2, 3}, reason: ReasonAge, age: maxWait})
	})
}

func TestFlushOnZeroWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, r := newWindow(t, 10, 0)
		<-add(t, w, 1).Done()
		wantWaves(t, r, flushed{id: 1, items: []int{1}, reason: ReasonAge})
	})
}

func TestWavesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 10 * time.Millisecond
		w, r := newWindow(t, 3, maxWait)
		add(t, w, 1, 2, 3, 4, 5) // a full wave, then two waiting
		time.Sleep(maxWait)
		synctest.Wait() // let the timer's flush run before the next Add
		add(t, w, 6)
		w.Flush()
		add(t, w, 7, 8, 9, 10)
		time.Sleep(maxWait)
		synctest.Wait()
		wantWaves(t, r,
			flushed{id: 1, items: []int{1, 2, 3}, reason: ReasonSize},
			flushed{id: 2, items: []int{4, 5}, reason: ReasonAge, age: maxWait},
			flushed{id: 3, items: []int{6}, reason: ReasonFlush},
			flushed{id: 4, items: []int{7, 8, 9}, reason: ReasonSize},
			flushed{id: 5, items: []int{10}, reason: ReasonAge, age: maxWait},
		)
	})
}

// TestWavesInOrderUnderRace has many adders race each other and the age
// timer, with a flush function that yields so that closes can queue up
// behind it: every wave must still reach flush once, in the order it opened.
// (The flush does not sleep: Adds wait on a mutex behind a running flush,
// and a bubble with a goroutine blocked on a mutex never advances time.)
func TestWavesInOrderUnderRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const adders, each = 8, 25
		var (
			mu    sync.Mutex
			ids   []uint64
			items []int
		)
		w, err := New(4, 3*time.Millisecond, func(wv *Wave[int]) {
			mu.Lock()
			ids = append(ids, wv.ID)
			items = append(items, wv.Items...)
			mu.Unlock()
			for range 3 {
				runtime.Gosched()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for a := range adders {
			wg.Go(func() {
				for i := range each {
					time.Sleep(time.Duration((a+i)%3) * time.Millisecond)
					add(t, w, a*each+i)
				}
			})
		}
		wg.Wait()
		w.Close()
		for i := 1; i < len(ids); i++ {
			if ids[i] != ids[i-1]+1 {
				t.Fatalf("waves flushed in order %v; want 1, 2, 3...", ids)
			}
		}
		slices.Sort(items)
		for i, it := range items {
			if it != i {
				t.Fatalf("flushed items (sorted) = %v; want each of 0..%d once", items, adders*each-1)
			}
		}
		if len(items) != adders*each {
			t.Fatalf("flushed %d items; want %d", len(items), adders*each)
		}
	})
}

func TestWithdrawOpenItem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, r := newWindow(t, 3, time.Second)
		add(t, w, 1, 2)
		if !w.Withdraw(1) {
			t.Fatal("Withdraw(1) from the open window = false; want true")
		}
		if w.Withdraw(1) {
			t.Error("second Withdraw(1) = true; want false")
		}
		if n := w.Pending(); n != 1 {
			t.Errorf("Pending() = %d; want 1", n)
		}
		add(t, w, 3, 4) // 2, 3, 4 fill it
		wantWaves(t, r, flushed{id: 1, items: []int{2, 3, 4}, reason: ReasonSize})
	})
}

func TestWithdrawEmptiesWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxWait = 100 * time.Millisecond
		w, r := newWindow(t, 3, maxWait)
		dropped := add(t, w, 1)
		time.Sleep(50 * time.Millisecond)
		if !w.Withdraw(1) {
			t.Fatal("Withdraw(1) = false; want true")
		}
		time.Sleep(10 * time.Millisecond)
		// A new item opens a new window with its own clock: the emptied
		// window's timer (due at 100ms) must not close it.
		wave := add(t, w, 2)
		time.Sleep(2 * maxWait)
		synctest.Wait()
		if isDone(dropped) {
			t.Error("the emptied wave was marked done")
		}
		if !isDone(wave) {
			t.Fatal("the new wave was never flushed")
		}
		if wave.ID == dropped.ID {
			t.Errorf("the new wave reused id %d", wave.ID)
		}
		wantWaves(t, r, flushed{id: wave.ID, items: []int{2}, reason: ReasonAge, age: maxWait})
	})
}

func TestWithdrawAfterFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, r := newWindow(t, 2, time.Second)
		add(t, w, 1, 2)
		add(t, w, 3) // 3 is open; 1 is in a closed wave
		if w.Withdraw(1) {
			t.Error("Withdraw of an item already flushed = true; want false")
		}
		if w.Withdraw(99) {
			t.Error("Withdraw of an item never added = true; want false")
		}
		if n := w.Pending(); n != 1 {
			t.Errorf("Pending() = %d; want 1 (the open window is untouched)", n)
		}
		w.Flush()
		if w.Withdraw(3) {
			t.Error("Withdraw after Flush = true; want false")
		}
		wantWaves(t, r,
			flushed{id: 1, items: []int{1, 2}, reason: ReasonSize},
			flushed{id: 2, items: []int{3}, reason: ReasonFlush},
		)
	})
}

func TestFlush(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, r := newWindow(t, 5, time.Second)
		w.Flush() // nothing open: nothing flushed
		wave := add(t, w, 1, 2)
		time.Sleep(300 * time.Millisecond)
		w.Flush()
		if !isDone(wave) {
			t.Error("Flush returned before the wave was done")
		}
		wantWaves(t, r, flushed{id: 1, items: []int{1, 2}, reason: ReasonFlush, age: 300 * time.Millisecond})
		time.Sleep(2 * time.Second) // the flushed window's timer must not fire
		synctest.Wait()
		w.Flush()
		wantWaves(t, r, flushed{id: 1, items: []int{1, 2}, reason: ReasonFlush, age: 300 * time.Millisecond})
	})
}

// FlushEarly closes only the wave it is given, and only while it is open.
func TestFlushEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, r := newWindow(t, 2, time.Second)
		first := add(t, w, 1)
		time.Sleep(5 * time.Millisecond)
		if !w.FlushEarly(first) {
			t.Fatal("FlushEarly(open wave) = false; want true")
		}
		if !isDone(first) {
			t.Error("FlushEarly returned before the wave was done")
		}
		if w.FlushEarly(first) {
			t.Error("FlushEarly(closed wave) = true; want false")
		}
		second := add(t, w, 2)
		if w.FlushEarly(first) {
			t.Error("FlushEarly(an older wave) closed the newer window")
		}
		add(t, w, 3) // second closes on size
		if w.FlushEarly(second) {
			t.Error("FlushEarly(a wave closed on size) = true; want false")
		}
		time.Sleep(2 * time.Second) // the early-closed window's timer must not fire
		synctest.Wait()
		wantWaves(t, r,
			flushed{id: 1, items: []int{1}, reason: ReasonIdle, age: 5 * time.Millisecond},
			flushed{id: 2, items: []int{2, 3}, reason: ReasonSize})
	})
}

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, r := newWindow(t, 5, time.Second)
		wave := add(t, w, 1, 2)
		w.Close()
		if !isDone(wave) {
			t.Error("Close returned before the open wave was done")
		}
		if _, err := w.Add(3); !errors.Is(err, ErrClosed) {
			t.Errorf("Add after Close = %v; want ErrClosed", err)
		}
		w.Close()
		w.Flush()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		wantWaves(t, r, flushed{id: 1, items: []int{1, 2}, reason: ReasonFlush})
	})
}

func TestAddAfterCloseEmpty(t *testing.T) {
	w, r := newWindow(t, 5, time.Second)
	w.Close()
	if wave, err := w.Add(1); !errors.Is(err, ErrClosed) || wave != nil {
		t.Errorf("Add after Close = %v, %v; want nil, ErrClosed", wave, err)
	}
	if n := w.Pending(); n != 0 {
		t.Errorf("Pending() = %d; want 0", n)
	}
	wantWaves(t, r)
}

func TestMaxSizeOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w, r := newWindow(t, 1, time.Second)
		var want []flushed
		for i := 1; i <= 4; i++ {
			wave := add(t, w, i)
			if !isDone(wave) {
				t.Fatalf("Add(%d) returned before its wave was flushed", i)
			}
			want = append(want, flushed{id: uint64(i), items: []int{i}, reason: ReasonSize})
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		wantWaves(t, r, want...)
	})
}

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{ReasonSize: "size", ReasonAge: "age", ReasonFlush: "flush", ReasonIdle: "idle", ReasonBytes: "bytes", 0: "unknown"} {
		if got := r.String(); got != want {
			t.Errorf("Reason(%d).String() = %q; want %q", r, got, want)
		}
	}
}

func TestDrainFlushesNowAndEveryLaterAdd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []Reason
		var sizes []int
		w, err := New(16, time.Hour, func(wave *Wave[int]) {
			got = append(got, wave.Reason)
			sizes = append(sizes, len(wave.Items))
		})
		if err != nil {
			t.Fatal(err)
		}
		w.Add(1)
		w.Add(2)
		w.Drain()
		wave, err := w.Add(3) // accepted just before shutdown, added just after
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-wave.Done():
		default:
			t.Fatal("an Add after Drain waits for its window")
		}
		if len(got) != 2 || got[0] != ReasonFlush || got[1] != ReasonFlush || sizes[0] != 2 || sizes[1] != 1 {
			t.Fatalf("waves %v of sizes %v; want two flushes, of 2 and 1", got, sizes)
		}
		if w.Pending() != 0 {
			t.Fatalf("pending = %d", w.Pending())
		}
	})
}
