package sim

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/request"
)

// An outage answers every request of its credentials with its status
// within its stretch, and no other credential's nor outside it.
func TestOutageOfOneCredential(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := request.Tenant(http.Header{"X-Api-Key": {"sk-down"}})
		s := New(Config{Outages: []Outage{{From: time.Second, To: 3 * time.Second, Credentials: []string{down}}}})
		defer s.Close()
		status := func(key string) int { return call(s, "POST", "/v1/messages", helloBody, "x-api-key", key).Code }
		if got := status("sk-down"); got != 200 {
			t.Errorf("before the outage: %d; want 200", got)
		}
		time.Sleep(time.Second)
		w := call(s, "POST", "/v1/messages", helloBody, "x-api-key", "sk-down")
		wantError(t, w, 529, "overloaded_error", "retry")
		if got := status("sk-up"); got != 200 {
			t.Errorf("another key during the outage: %d; want 200", got)
		}
		time.Sleep(2*time.Second - time.Millisecond)
		if got := status("sk-down"); got != 529 {
			t.Errorf("at its last moment: %d; want 529", got)
		}
		time.Sleep(time.Millisecond)
		if got := status("sk-down"); got != 200 {
			t.Errorf("after the outage: %d; want 200", got)
		}
		if got := s.Stats().ByStatus["529"]; got != 2 {
			t.Errorf("529s counted: %d; want 2", got)
		}
	})
}

// An outage that names no credential takes every request, with its status.
func TestOutageOfEveryone(t *testing.T) {
	s := New(Config{Outages: []Outage{{To: time.Hour, Status: 500}}})
	defer s.Close()
	for _, key := range []string{"sk-a", "sk-b"} {
		wantError(t, call(s, "POST", "/v1/messages", helloBody, "x-api-key", key), 500, "api_error", "retry")
	}
}

func TestOutageFlag(t *testing.T) {
	var l outageList
	if err := l.Set("1s-2s, 3s-4s:500@aa+bb"); err != nil {
		t.Fatal(err)
	}
	if got, want := l.String(), "1s-2s:529,3s-4s:500@aa+bb"; got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}
	for _, bad := range []string{"1s", "2s-1s", "1s-2s:503", "x-2s"} {
		if err := l.Set(bad); err == nil {
			t.Errorf("Set(%q) took it", bad)
		}
	}
}

// With BucketsSpent a new credential's buckets start that much spent.
func TestBucketsStartSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 60 requests a minute, 90 % spent: 6 at once, then one a second.
		s := New(Config{RequestsPerMinute: 60, BucketsSpent: 0.9})
		defer s.Close()
		for i := range 6 {
			if w := call(s, "POST", "/v1/messages", helloBody); w.Code != 200 {
				t.Fatalf("request %d: %d; want 200", i, w.Code)
			}
		}
		if w := call(s, "POST", "/v1/messages", helloBody); w.Code != 429 {
			t.Errorf("the 7th at once: %d; want 429", w.Code)
		}
		time.Sleep(time.Second)
		if w := call(s, "POST", "/v1/messages", helloBody); w.Code != 200 {
			t.Errorf("a second later: %d; want 200", w.Code)
		}
	})
	s := New(Config{InputTokensPerMinute: 1000, BucketsSpent: 0.75})
	defer s.Close()
	if level, size, ok := s.InputTokenBucket(); !ok || size != 1000 || level != 250 {
		t.Errorf("InputTokenBucket() = %v, %d, %v; want 250 of 1000", level, size, ok)
	}
}
