package window

import (
	"testing"
	"time"
)

// BenchmarkWindowAdd is the cost of one member joining a window of 16 that
// closes on size: every 16th Add opens the next window and flushes a wave.
func BenchmarkWindowAdd(b *testing.B) {
	w, err := New(16, time.Hour, func(*Wave[int]) {})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := w.Add(i); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkWindowAddParallel is BenchmarkWindowAdd with concurrent adders
// contending for the window's lock.
func BenchmarkWindowAddParallel(b *testing.B) {
	w, err := New(16, time.Hour, func(*Wave[int]) {})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := w.Add(i); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
