package gate_test

import (
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/gate/gatetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLocal(t *testing.T) {
	gatetest.RunLimit(t, func(limit gate.Limit) gate.Gate {
		g, err := gate.New(limit, nil)
		if err != nil {
			t.Fatalf("New(%v): %v", limit, err)
		}
		return g
	})
}

func TestNewRejectsBadCapacity(t *testing.T) {
	for _, c := range []int{0, -1} {
		g, err := gate.New(gate.Fixed(c), nil)
		if !errors.Is(err, gate.ErrBadCapacity) || g != nil {
			t.Errorf("New(Fixed(%d)) = %v, %v; want nil, ErrBadCapacity", c, g, err)
		}
	}
	if g, err := gate.New(nil, nil); !errors.Is(err, gate.ErrBadCapacity) || g != nil {
		t.Errorf("New(nil) = %v, %v; want nil, ErrBadCapacity", g, err)
	}
}
