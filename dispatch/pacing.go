package dispatch

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
)

// The pacing policy's face: what the scheduler asks of it, and the
// member's usage it is told.

// Pacing holds members back, outside the gate, until what they will spend
// of their upstream key's rate limits is there, and learns from each
// answer what was spent. A member it holds takes no slot, so one key's
// spent limit never holds another key's requests. Config.Pacing sets it;
// its methods are called on the request path and must not block.
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

// BucketStore keeps the model of each upstream key's rate-limit buckets
// that KeyBuckets paces by: a *pace.Buckets in this process, or one that
// every replica shares (redisshare.Buckets). Its methods are pace.Buckets'.
type BucketStore interface {
	Take(key string, c pace.Cost, now time.Time) (pace.Debit, bool, time.Time)
	FitsAt(key string, c pace.Cost, now time.Time) time.Time
	Refund(d pace.Debit, now time.Time)
	Correct(d pace.Debit, spent pace.Cost, now time.Time)
	Observe(key string, d pace.Debit, status int, h http.Header, now time.Time)
	Levels(now time.Time) []pace.Level
}

// spend is a member's debit of its key's buckets.
type spend struct {
	debit   pace.Debit
	settled bool          // an answer came: End gives nothing back
	held    time.Duration // how long Pace held it, in all
}

// BucketWait is how long the member was held for its key's rate limits.
// Read it from the member's function.
func (m *Member) BucketWait() time.Duration {
	if sp := spendNote.Peek(m); sp != nil {
		return sp.held
	}
	return 0
}

// spendNote is KeyBuckets' record of each member it paced.
var spendNote = NewNote[spend]()
