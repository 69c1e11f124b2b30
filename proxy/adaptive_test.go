package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/sim"
)

// recordingLimit is a fixed limit that keeps what the gate tells it.
type recordingLimit struct {
	gate.Fixed
	mu       sync.Mutex
	outcomes []gate.Outcome
}

func (l *recordingLimit) Observe(o gate.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.outcomes = append(l.outcomes, o)
}

func (l *recordingLimit) heard() []gate.Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.outcomes)
}

// The gate learns each stream's time to first token, from the call's
// sending to its first content event, and none for a JSON answer, which
// arrives whole: the adaptive limit reads the first and not the answer's
// whole time, which its length stretches.
func TestGateLearnsTimeToFirstToken(t *testing.T) {
	const ttft = 150 * time.Millisecond
	s := sim.New(sim.Config{TTFT: ttft, PerToken: 5 * time.Millisecond, OutputTokensMin: 40, OutputTokensMax: 40})
	defer s.Close()
	up := httptest.NewServer(s)
	defer up.Close()
	l := &recordingLimit{Fixed: 4}
	g, err := gate.New(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, px := startProxyWith(t, testConfig(t, up.URL, true), Options{Parts: assemble.Parts{Gate: g}})
	for _, body := range []string{streamRequestJSON, requestJSON} {
		r := post(t, px.URL, "/v1/messages", body)
		readAll(t, r.Body)
		if r.StatusCode != 200 {
			t.Fatalf("status %d", r.StatusCode)
		}
	}
	heard := l.heard()
	if len(heard) != 2 {
		t.Fatalf("gate heard %d outcomes; want 2: %v", len(heard), heard)
	}
	// The sim's first text delta carries tokens 0 to 3: TTFT and 3 more.
	stream, whole := heard[0], heard[1]
	if stream.End != gate.EndOK || stream.FirstToken < ttft || stream.FirstToken > ttft+100*time.Millisecond {
		t.Errorf("stream's outcome %+v; want EndOK with a first token in [%v, %v]", stream, ttft, ttft+100*time.Millisecond)
	}
	if stream.Held < stream.FirstToken+150*time.Millisecond {
		t.Errorf("stream held its slot %v; want its 40 tokens after the first token %v too", stream.Held, stream.FirstToken)
	}
	if whole.End != gate.EndOK || whole.FirstToken != 0 {
		t.Errorf("JSON answer's outcome %+v; want EndOK and no first token", whole)
	}
}

// GATE_LIMIT=adaptive gives the gate an adaptive limit that starts at
// BATCH_MAX_CONCURRENCY and learns down from an overloaded upstream's 529;
// static keeps the cap whatever the upstream answers.
func TestGateLimitSetting(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Should-Retry", "false")
		w.WriteHeader(529)
		io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	})
	for _, tc := range []struct {
		limit config.GateLimit
		after int // the gate's capacity after one 529
	}{{config.GateLimitStatic, 12}, {config.GateLimitAdaptive, 9}} {
		p, px := startProxyWith(t, testConfig(t, up.URL, true, func(c *config.Config) {
			c.MaxConcurrency, c.GateLimit, c.GateLimitFloor = 12, tc.limit, 3
		}), Options{})
		if got := p.GateStats().Capacity; got != 12 {
			t.Errorf("GATE_LIMIT=%s: gate capacity %d at the start; want 12, BATCH_MAX_CONCURRENCY", tc.limit, got)
		}
		if r := post(t, px.URL, "/v1/messages", requestJSON); r.StatusCode != 529 {
			t.Fatalf("GATE_LIMIT=%s: status %d; want the upstream's 529", tc.limit, r.StatusCode)
		}
		if got := p.GateStats().Capacity; got != tc.after {
			t.Errorf("GATE_LIMIT=%s: gate capacity %d after a 529; want %d", tc.limit, got, tc.after)
		}
	}
}
