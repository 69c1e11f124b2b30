package redisgate

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/gate/gatetest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisconn"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testGate(t *testing.T, c *redisconn.Client, capacity int) *Gate {
	t.Helper()
	g, err := New(c, redistest.Name(), capacity)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestConformance runs the gate suite against a real Redis: every
// grant, release and count goes through the scripts.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := redistest.Open(t, srv.URL, redisconn.Options{LeaseTTL: time.Minute}) // no heartbeat during the suite
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
	c := redistest.Open(t, "redis://127.0.0.1:1/0", redisconn.Options{Replicas: 1})
	gatetest.Run(t, func(capacity int) gate.Gate {
		g := testGate(t, c, capacity)
		if g.Shared() {
			t.Fatal("the gate is shared with no Redis")
		}
		return g
	})
}
