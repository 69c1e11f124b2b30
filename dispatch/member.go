package dispatch

import (
	"context"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/request"
	"github.com/sluicehq/sluice/window"
)

// Member is one request's passage through the scheduler. Its function
// receives it to learn its wave, to lift its deadline, to requeue, and to
// report the answer.
type Member struct {
	s        *Scheduler
	req      *request.Descriptor
	ticket   gate.Ticket
	wave     *window.Wave[*Member]
	deadline *waveDeadline
	life     atomic.Int32 // a stage; moved only by move
	joined   time.Time
	granted  time.Time
	heldFrom time.Time // when the slot now held was granted (again, after a Requeue)
	released time.Time // set only when Hooks.Started is
	status   int       // the last answer's status, for the gate's Outcome; fn's goroutine only
	// firstToken is how long after its upstream call was sent the last
	// answer's first token came, for the gate's Outcome; fn's goroutine only.
	firstToken time.Duration

	// What Start was given.
	ctx    context.Context
	fn     func(ctx context.Context, m *Member) error
	done   func(error)
	caller chan error              // set when its caller waits to serve it (Do): gets errGranted, or how the wait ended
	cancel context.CancelCauseFunc // cancels fn's ctx; set before the member is calling

	sig signals
	// notes are the policies' own records of the member (see Note); more
	// holds those past the inline ones, under sig.mu. (A pointer, and
	// expectRead an int32 beside the bools: the member stays within the
	// 512-byte size class it had with four fixed slots.)
	notes  [inlineNotes]any
	more   *[]any
	tenant Tenant // its tenant, as Config.Tenants counts it; nil without
	// keyCold says its routed key holds none of its prefixes (Routed.Cold).
	keyCold bool
	// refused says an admission refused it at its release (Recheck): its
	// slot's use says nothing of the upstream. fn's goroutine only.
	refused bool
	// expectRead is how many of its prompt's tokens a releaser expects it
	// to read from the cache (ExpectRead).
	expectRead int32
}

// stage is where a member is in its life. Each move is one compare-and-swap
// from the stage its mover expects, so that of several movers (the gate, the
// client's departure, the wave deadline) exactly one wins each step.
type stage int32

const (
	inWindow stage = iota // in an open window
	flushed               // its wave closed; its Releaser has not put it in line yet
	inLine                // its ticket waits in the gate's line
	granted               // holds a slot; its call is not yet under way
	calling               // its function runs, under the wave deadline
	lifted                // its function runs; it lifted the deadline
	cutOff                // the deadline passed while it held its slot: fn's ctx is cancelled
	leaving               // its wait ended without a slot: its client left, or its deadline passed
)

// move takes m from stage from to stage to, and reports whether it did.
func (m *Member) move(from, to stage) bool { return m.life.CompareAndSwap(int32(from), int32(to)) }

// at reports whether m is at stage st.
func (m *Member) at(st stage) bool { return stage(m.life.Load()) == st }

// signals are what a member tells the outside as its life goes on: when
// its response began, and that it ended (which drops its departure watch).
type signals struct {
	mu        sync.Mutex
	begun     chan struct{} // made when someone asks (Begun)
	hasBegun  bool          // the response began, or the member ended
	answered  bool          // the response began, and with a success (see MarkBegun)
	ended     bool
	stopWatch func() bool           // unregisters the departure watch
	after     []func(answered bool) // called once begun (AfterBegun)
}

// WaveID is the id of the member's wave.
func (m *Member) WaveID() uint64 { return m.wave.ID }

// FlushReason says why the member's wave closed.
func (m *Member) FlushReason() window.Reason { return m.wave.Reason }

// Request is what is known of the member's request; its policies read it.
func (m *Member) Request() *request.Descriptor { return m.req }

// Arrived is when the member was admitted, into its window: its client's
// patience (request.Descriptor.Patience) is counted from then.
func (m *Member) Arrived() time.Time { return m.joined }

// Unjoined reports whether the member's wave has closed and it is not in
// the gate's line yet, nor has it left: a releaser or a pacing that holds
// it may still let it go. One that left (its client gone, its deadline
// passed) reports false from then on, and is dropped by whoever held it.
func (m *Member) Unjoined() bool { return m.at(flushed) }

// KeyCold reports whether the upstream key the member was last routed to
// holds none of its prompt's prefixes (Routed.Cold): whatever a releaser
// expected, it reads nothing from that key's cache.
func (m *Member) KeyCold() bool { return m.keyCold }

// ExpectRead says how many of the member's prompt tokens are expected to
// be read from the prompt cache: a releaser that knows (the cache-aware
// release, as it puts the member in line) says so, for the pacing to
// count them out of its input estimate. Call it before the member joins.
func (m *Member) ExpectRead(tokens int) { m.expectRead = int32(min(tokens, math.MaxInt32)) }

// ExpectedRead is how many of the member's prompt tokens are expected to
// be read from the prompt cache: what a releaser said (ExpectRead), or 0
// if none did or its routed key is cold (KeyCold).
func (m *Member) ExpectedRead() int {
	if m.keyCold {
		return 0
	}
	return int(m.expectRead)
}

// QueueWait is how long the member waited, in its window and for a slot.
func (m *Member) QueueWait() time.Duration { return m.granted.Sub(m.joined) }

// Granted is when the member got its slot.
func (m *Member) Granted() time.Time { return m.granted }

// Released is when the member gave its slot back; zero until then, and
// always zero unless Hooks.Started is set. Read it after the member's
// passage has ended.
func (m *Member) Released() time.Time { return m.released }

// SlotWait is how long the member waited for a slot after its wave closed.
func (m *Member) SlotWait() time.Duration { return m.granted.Sub(m.wave.ClosedAt) }

// Deadline is the time by which the member's function must finish, unless it
// lifts the deadline first.
func (m *Member) Deadline() time.Time { return m.wave.ClosedAt.Add(m.deadline.timeout) }

// LiftDeadline ends the deadline's hold on the member: from now on only the
// caller's own context governs. A streaming relay calls it once the response
// headers are in, since a stream's length is not bounded by the wave. It
// reports false if the deadline had already passed; the deadline then keeps
// its hold, and fn's ctx is or will be cancelled with it.
func (m *Member) LiftDeadline() bool {
	if !m.move(calling, lifted) {
		return m.at(lifted) // lifted already, or cut off
	}
	if m.deadline.passed() && m.move(lifted, cutOff) {
		// It passed as we lifted, and its sweep may not have reached us:
		// the deadline keeps its hold.
		m.cancel(ErrDeadline)
		return false
	}
	return true
}

// Settle reports an upstream answer to the member's request: its admission
// learns from it (a rate limit's headers, say), and the gate hears of it
// when the slot is given back. Only the member's function may call it.
func (m *Member) Settle(status int, h http.Header) {
	m.status = status
	m.s.admission.Settle(m.req, status, h)
	if m.s.pacing != nil {
		m.s.pacing.Settle(m, status, h)
	}
}

// FirstToken says how long after the upstream call was sent the answer's
// first token came (a stream's first content event): an adaptive limit
// learns from it. Only the member's function may call it.
func (m *Member) FirstToken(d time.Duration) { m.firstToken = d }

// MarkBegun says that the member's response has begun: the first byte of
// a JSON answer, or a stream's headers, are going out to its client.
func (m *Member) MarkBegun() {
	// Only a success leaves a cache entry behind: an error answer (a 4xx,
	// or the upstream's 529 given up on) says nothing of the prefix.
	ok := m.status < 300 // 0: nothing settled, as in tests of fn alone
	m.sig.mu.Lock()
	after := m.sig.markBegun(ok)
	m.sig.mu.Unlock()
	for _, f := range after {
		f(ok)
	}
}

// AfterBegun calls f once m's Begun has closed, with whether its response
// began with a success: at once if it has closed already, else on the
// goroutine that closes it (which may hold no lock of the caller's). It
// holds no goroutine while it waits, so that a releaser can wait on many
// members for nothing but a record each.
func (m *Member) AfterBegun(f func(answered bool)) {
	m.sig.mu.Lock()
	if !m.sig.hasBegun {
		m.sig.after = append(m.sig.after, f)
		m.sig.mu.Unlock()
		return
	}
	ok := m.sig.answered
	m.sig.mu.Unlock()
	f(ok)
}

// Begun is closed once the member's response has begun (MarkBegun), or
// its passage has ended without one, so that a releaser waiting on it to
// let others follow is never left waiting. The channel is made only when
// asked for.
func (m *Member) Begun() <-chan struct{} {
	m.sig.mu.Lock()
	defer m.sig.mu.Unlock()
	if m.sig.begun == nil {
		m.sig.begun = make(chan struct{})
		if m.sig.hasBegun {
			close(m.sig.begun)
		}
	}
	return m.sig.begun
}

// markBegun closes begun, once, and returns what waits on it, for its
// caller to call once sig.mu is no longer held. sig.mu is held.
func (sig *signals) markBegun(answered bool) []func(bool) {
	if sig.hasBegun {
		return nil
	}
	sig.hasBegun, sig.answered = true, answered
	if sig.begun != nil {
		close(sig.begun)
	}
	after := sig.after
	sig.after = nil
	return after
}

// outcome is how the use of m's slot went, for the gate: fn's error err,
// and the last answer it settled.
func (m *Member) outcome(now time.Time, err error) gate.Outcome {
	var o gate.Outcome
	if !m.heldFrom.IsZero() { // zero: it left before its call began
		o.Held = now.Sub(m.heldFrom)
	}
	switch {
	case m.refused:
		o.End = gate.EndUnknown // no call was made
		m.refused = false
	case err == ErrDeadline:
		o.End = gate.EndDeadline
	case m.ctx.Err() != nil:
		o.End = gate.EndCancelled
	case m.status == http.StatusTooManyRequests:
		o.End = gate.EndRateLimited
	case m.status >= 500:
		o.End = gate.EndOverloaded // 529 too
	case m.status != 0 || err == nil:
		o.End = gate.EndOK
	default:
		o.End = gate.EndOverloaded // no answer at all
	}
	if o.End == gate.EndOK {
		o.FirstToken = m.firstToken
	}
	m.status, m.firstToken = 0, 0
	return o
}
