package dispatch

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestClientTimeoutShedsWhatItCannotServeInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, g := newTestScheduler(t, Config{MaxSize: 1, Timeout: time.Minute, Admission: ClientTimeout{}}, 2)
		second := func(context.Context, *Member) error { time.Sleep(time.Second); return nil }

		// Nothing measured yet: nobody is shed on a guess.
		if err := s.Do(context.Background(), patient(time.Millisecond), second); err != nil {
			t.Fatalf("first request: %v", err)
		}
		if got := s.ServiceTime(); got != time.Second {
			t.Fatalf("service time = %v; want 1s", got)
		}

		// Fill the 2 slots and put 8 more in line: 10 ahead of a newcomer.
		release := make(chan struct{})
		held := func(context.Context, *Member) error { <-release; return nil }
		errs := make(chan error, 10)
		for range 10 {
			go func() { errs <- s.Do(context.Background(), nil, held) }()
			synctest.Wait()
		}
		if st := g.Stats(); st.InFlight != 2 || s.Queued() != 8 {
			t.Fatalf("gate %+v queued %d; want 2 in flight and 8 waiting", st, s.Queued())
		}
		// 8 waiting beyond the free slots (none) + itself, over 2 slots of 1 s: 4.5 s.
		if got := s.ExpectedWait(); got != 4500*time.Millisecond {
			t.Fatalf("expected wait = %v; want 4.5s", got)
		}

		start := time.Now()
		err := s.Do(context.Background(), patient(5*time.Second), second)
		var tooLong *WaitTooLongError
		if !errors.As(err, &tooLong) || tooLong.Expected != 4500*time.Millisecond || tooLong.Patience != 5*time.Second {
			t.Fatalf("patience 5s: err = %v; want WaitTooLongError{4.5s, 5s} (4.5 s wait + 1 s service > 5 s)", err)
		}
		if time.Since(start) != 0 || s.Queued() != 8 {
			t.Fatalf("shed after %v with %d queued; want at once, queue untouched", time.Since(start), s.Queued())
		}

		// A patient client, and one that said nothing, are queued.
		waiting := make(chan error, 2)
		go func() { waiting <- s.Do(context.Background(), patient(10*time.Second), second) }()
		go func() { waiting <- s.Do(context.Background(), nil, second) }()
		synctest.Wait()
		if s.Queued() != 10 {
			t.Fatalf("queued = %d; want the patient and the silent client waiting too", s.Queued())
		}
		close(release)
		for range 10 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := <-waiting; err != nil {
				t.Fatal(err)
			}
		}
	})
}
