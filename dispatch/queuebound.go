package dispatch

import (
	"errors"

	"github.com/sluicehq/sluice/request"
)

// ErrQueueFull is returned, at once, when the queue bound's Max members
// are already waiting: shedding the excess keeps waiting and memory
// bounded however hard clients push.
var ErrQueueFull = errors.New("dispatch: queue full")

// QueueBound caps the members waiting, in windows or for a slot
// (BATCH_MAX_QUEUE): past Max it refuses with ErrQueueFull. A Max of zero
// or less means no cap.
type QueueBound struct {
	Open
	Max int
}

var _ Admission = QueueBound{}

// Admit refuses when Max members already wait ahead of r.
func (q QueueBound) Admit(_ *request.Descriptor, l Load) error {
	if q.Max > 0 && l.Queued() >= q.Max {
		return ErrQueueFull
	}
	return nil
}
