package proxy

import (
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/dispatch"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/window"
)

// countingReleaser is InOrder that counts the waves it released.
type countingReleaser struct{ waves atomic.Int32 }

func (c *countingReleaser) Release(w *window.Wave[*dispatch.Member], join func(*dispatch.Member)) {
	c.waves.Add(1)
	dispatch.InOrder{}.Release(w, join)
}

// refuseAll admits nobody, as a policy of another kind might.
type refuseAll struct{ dispatch.Open }

func (refuseAll) Admit(*request.Descriptor, dispatch.Load) error { return dispatch.ErrQueueFull }

// The parts of the windowed path come through Options: the gate, the
// releaser and the admission given are the ones the requests go through.
func TestPartsAreInjectedThroughOptions(t *testing.T) {
	up := startUpstream(t, apiHandler)
	g, err := gate.New(gate.Fixed(3), nil)
	if err != nil {
		t.Fatal(err)
	}
	rel := &countingReleaser{}
	p, px := startProxyWith(t, testConfig(t, up.URL, true), Options{Parts: assemble.Parts{Gate: g, Releaser: rel}})
	if r := post(t, px.URL, "/v1/messages", requestJSON); r.StatusCode != 200 {
		t.Fatalf("status %d", r.StatusCode)
	}
	if got := p.GateStats().Capacity; got != 3 {
		t.Errorf("gate capacity %d; want the injected gate's 3", got)
	}
	if rel.waves.Load() != 1 {
		t.Errorf("the injected releaser released %d waves; want 1", rel.waves.Load())
	}

	_, px2 := startProxyWith(t, testConfig(t, up.URL, true), Options{Parts: assemble.Parts{Admission: refuseAll{}}})
	wantError(t, post(t, px2.URL, "/v1/messages", requestJSON), 429, "rate_limit_error", "BATCH_MAX_QUEUE")
}
