package redisconn_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisconn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPasswordNeverShown: the URL's password is hidden in what a log
// shows of it.
func TestPasswordNeverShown(t *testing.T) {
	if got := redisconn.Redacted("redis://:s3cret@10.0.0.9:6379/0"); strings.Contains(got, "s3cret") {
		t.Errorf("Redacted shows the password: %s", got)
	}
	if got := redisconn.Redacted("::not a url"); got != "(not shown)" {
		t.Errorf("Redacted of text that is no URL = %q; want it not shown", got)
	}
	if _, err := redisconn.Open(redisconn.Options{URL: "redis://:s3cret@10.0.0.9:6379/notadb"}); err == nil {
		t.Error("Open took a database that is not a number")
	}
}

// TestHandleTakesAChannelOnce: a second handler of one channel is
// refused (two gates of one name on one client).
func TestHandleTakesAChannelOnce(t *testing.T) {
	c := redistest.Open(t, "redis://127.0.0.1:1/0", redisconn.Options{})
	if !c.Handle("ch", func(string) {}) {
		t.Fatal("the first handler of a channel was refused")
	}
	if c.Handle("ch", func(string) {}) {
		t.Error("a second handler of one channel was taken")
	}
}

// TestOutageEndsWhenRedisAnswers: a part's outage begins with a failed
// call and ends at the first tick on which Redis answers a ping.
func TestOutageEndsWhenRedisAnswers(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.Open(t, srv.URL, redisconn.Options{LeaseTTL: 400 * time.Millisecond})
	o := c.Outage("test")
	if !o.Up() {
		t.Fatal("a new part is on its fallback")
	}
	o.Fail(errors.New("a call timed out"))
	if o.Up() {
		t.Fatal("the part is up after a failed call")
	}
	for deadline := time.Now().Add(5 * time.Second); !o.Up(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the outage did not end within 5 s with Redis answering (ticks every 100 ms)")
		}
	}
}
