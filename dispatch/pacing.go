package dispatch

import (
	"net/http"

	"github.com/sluicehq/sluice/request"
)

// The pacing policy's face: what the scheduler asks of it, and the
// member's usage it is told.

// Pacing holds members back, outside the gate, until what they will spend
// of their upstream key's rate limits is there, and learns from each
// answer what was spent. A member it holds takes no slot, so one key's
// spent limit never holds another key's requests. Config.Pacing sets it
// (today's is package buckets' buckets.Pacing); its methods are called on the
// request path and must not block.
type Pacing interface {
	// Pace calls join(m) once m may go, now or later, unless live reports
	// that m no longer waits by then.
	Pace(m *Member, join func(*Member), live func() bool)
	// Settle learns from an upstream answer to m: its status and headers.
	Settle(m *Member, status int, h http.Header)
	// Used corrects m's estimate with the usage its answer reported (a
	// pacing is the first Learner the scheduler tells).
	Used(m *Member, u Usage)
	// End is m's passage ending: a debit no answer settled is given back.
	End(m *Member)
	// Holds reports whether a request like r would be held now.
	Holds(r *request.Descriptor) bool
}
