package dispatch

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/request"
)

// WaitTooLongError is returned, at once, when the wait the request would
// face in line is longer than its client will wait: admitting it would only
// let it reach a slot as its client gives up, wasting the slot and the
// upstream's work on an answer nobody reads.
type WaitTooLongError struct {
	Expected time.Duration // the estimated wait for a slot
	Patience time.Duration // what the client said it would wait in all
}

func (e *WaitTooLongError) Error() string {
	return fmt.Sprintf("dispatch: expected wait %s plus service exceeds the client's %s", e.Expected, e.Patience)
}

// ClientTimeout refuses a request whose client gives up (its Patience)
// before the expected wait for a slot plus the average service time: under
// sustained overload a FIFO queue otherwise grows until every request
// reaches its slot just as its client leaves. A request of unknown
// patience is admitted.
type ClientTimeout struct{ Open }

var _ Admission = ClientTimeout{}

// Admit refuses r with a *WaitTooLongError when it could not be served in
// time.
func (ClientTimeout) Admit(r *request.Descriptor, l Load) error {
	if r == nil || r.Patience <= 0 {
		return nil
	}
	if wait := l.ExpectedWait(); wait > 0 && wait+l.ServiceTime() > r.Patience {
		return &WaitTooLongError{Expected: wait, Patience: r.Patience}
	}
	return nil
}
