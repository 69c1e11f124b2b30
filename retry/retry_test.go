package retry

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		status int
		should string
		want   bool
	}{
		{429, "", true}, {529, "", true}, {500, "", true}, {502, "", true}, {503, "", true}, {504, "", true},
		{400, "", false}, {401, "", false}, {404, "", false}, {413, "", false}, {200, "", false},
		{529, "false", false}, {429, "false", false},
		{501, "true", true}, {501, "", false},
		{400, "true", false}, {409, "true", false}, // other 4xx never
	} {
		h := http.Header{}
		if tc.should != "" {
			h.Set("X-Should-Retry", tc.should)
		}
		if _, got := Retryable(tc.status, h); got != tc.want {
			t.Errorf("Retryable(%d, x-should-retry=%q) = %v; want %v", tc.status, tc.should, got, tc.want)
		}
	}
}

func TestBackoffSchedule(t *testing.T) {
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}
	for n, w := range want {
		if got := Backoff(n, 0); got != w {
			t.Errorf("Backoff(%d, 0) = %v; want %v", n, got, w)
		}
		if got := Backoff(n, 0.999999); got <= w*3/4-time.Millisecond || got > w*3/4+time.Millisecond {
			t.Errorf("Backoff(%d, ~1) = %v; want about %v (25%% jitter)", n, got, w*3/4)
		}
	}
	if got := Backoff(62, 0); got != 8*time.Second {
		t.Errorf("Backoff(62) = %v; want the 8s cap, no overflow", got)
	}
}

func TestAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		ms, s string
		want  time.Duration
		ok    bool
	}{
		{"", "", 0, false},
		{"250", "7", 250 * time.Millisecond, true}, // -ms wins
		{"", "7", 7 * time.Second, true},
		{"", "1.5", 1500 * time.Millisecond, true},
		{"", now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second, true},
		{"", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"", "soon", 0, false},
		{"x", "2", 2 * time.Second, true}, // a bad -ms falls back to retry-after
	} {
		h := http.Header{}
		if tc.ms != "" {
			h.Set("Retry-After-Ms", tc.ms)
		}
		if tc.s != "" {
			h.Set("Retry-After", tc.s)
		}
		got, ok := After(h, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("After(ms=%q, s=%q) = %v, %v; want %v, %v", tc.ms, tc.s, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBudgetCapsRetriesAtShareOfRequestsWithFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBudget(20, 1) // floor: 1/s, 10 over the window
		for range 1000 {
			b.Request()
		}
		spent := 0
		for b.Spend() {
			spent++
		}
		if spent != 200 {
			t.Fatalf("retries allowed for 1000 requests at 20%% = %d; want 200", spent)
		}
		// The window slides: after 10 s the old requests and retries are gone
		// and only the floor remains.
		time.Sleep(10 * time.Second)
		spent = 0
		for b.Spend() {
			spent++
		}
		if spent != 10 {
			t.Fatalf("retries allowed with no recent requests = %d; want the floor, 10", spent)
		}
	})
}
