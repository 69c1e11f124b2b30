package logbuf

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sink is a destination that counts its writes.
type sink struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *sink) read() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.writes
}

// Lines wait for the delay, then go out in one write.
func TestLinesGoOutTogetherAfterTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sink
		w := New(&s, 50*time.Millisecond)
		defer w.Close()
		for i := range 3 {
			fmt.Fprintf(w, "line %d\n", i)
		}
		time.Sleep(49 * time.Millisecond)
		synctest.Wait()
		if got, n := s.read(); got != "" || n != 0 {
			t.Fatalf("before the delay: %q in %d writes; want nothing", got, n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got, n := s.read(); got != "line 0\nline 1\nline 2\n" || n != 1 {
			t.Fatalf("after the delay: %q in %d writes; want three lines in one", got, n)
		}
		// The next line waits a delay of its own.
		fmt.Fprintf(w, "line 3\n")
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if got, n := s.read(); !strings.HasSuffix(got, "line 3\n") || n != 2 {
			t.Fatalf("%q in %d writes", got, n)
		}
	})
}

// Past MaxHeld, the write that crossed it writes everything at once.
func TestMaxHeldWritesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sink
		w := New(&s, time.Hour)
		defer w.Close()
		line := strings.Repeat("x", 1023) + "\n"
		for range MaxHeld / len(line) {
			w.Write([]byte(line))
		}
		if got, n := s.read(); len(got) != MaxHeld || n != 1 {
			t.Fatalf("%d bytes in %d writes; want %d in 1", len(got), n, MaxHeld)
		}
	})
}

// Close writes what is held; writes after it go straight through.
func TestCloseFlushesAndThenWritesThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s sink
		w := New(&s, time.Hour)
		w.Write([]byte("a\n"))
		w.Close()
		if got, _ := s.read(); got != "a\n" {
			t.Fatalf("after Close: %q", got)
		}
		w.Write([]byte("b\n"))
		if got, n := s.read(); got != "a\nb\n" || n != 2 {
			t.Fatalf("a write after Close: %q in %d writes", got, n)
		}
	})
}

// Concurrent writers: every line arrives whole, each writer's in its
// order.
func TestConcurrentLinesStayWholeAndInOrder(t *testing.T) {
	var s sink
	w := New(&s, time.Millisecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				fmt.Fprintf(w, "g%d %05d %s\n", g, i, strings.Repeat("y", i%200))
			}
		}()
	}
	wg.Wait()
	w.Close()
	got, _ := s.read()
	next := map[string]int{}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 8*2000 {
		t.Fatalf("%d lines; want %d", len(lines), 8*2000)
	}
	for _, l := range lines {
		var g string
		var i int
		var pad string
		if _, err := fmt.Sscanf(l, "%s %d %s", &g, &i, &pad); err != nil && i%200 != 0 {
			t.Fatalf("line %q: %v", l, err)
		}
		if i != next[g] || len(pad) != i%200 {
			t.Fatalf("line %q: want %s's line %d", l, g, next[g])
		}
		next[g]++
	}
}
