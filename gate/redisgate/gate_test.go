package redisgate

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/gate/gatetest"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open opens a client on url for the test, closed when it ends, with its
// pool warmed up so that a synctest bubble never has to dial.
func open(t *testing.T, url string, opt Options) *Client {
	t.Helper()
	opt.URL = url
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { c.ping() })
	}
	wg.Wait()
	return c
}

// names gives each gate of a test a name of its own, so that gates of one
// Redis do not share state.
var names atomic.Int64

func testGate(t *testing.T, c *Client, capacity int) *Gate {
	t.Helper()
	g, err := c.Gate(fmt.Sprintf("test%d", names.Add(1)), capacity)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestConformance runs the gate suite against a real Redis: every
// grant, release and count goes through the scripts.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := open(t, srv.URL, Options{LeaseTTL: time.Minute}) // no heartbeat during the suite
	gatetest.Run(t, func(capacity int) gate.Gate {
		g := testGate(t, c, capacity)
		if !g.Shared() {
			t.Fatal("the gate is on its fallback with Redis up")
		}
		return g
	})
}

// TestConformanceFallback runs the suite on a gate whose Redis never
// answers: on its local fallback cap (here the whole cap, one replica) it
// is a gate like any other.
func TestConformanceFallback(t *testing.T) {
	c := open(t, "redis://127.0.0.1:1/0", Options{Replicas: 1})
	gatetest.Run(t, func(capacity int) gate.Gate {
		g := testGate(t, c, capacity)
		if g.Shared() {
			t.Fatal("the gate is shared with no Redis")
		}
		return g
	})
}
