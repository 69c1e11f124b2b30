package dispatch

import (
	"net/http"
	"time"

	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/request"
)

// RateLimitHold holds granted members back while the upstream reports a
// rate limit exhausted (see package pace): a member that gets its slot
// waits, holding it, until the limit resets, so that everyone behind it
// keeps their place in line and arrival order is kept.
type RateLimitHold struct {
	Open
	Pacer *pace.Pacer
}

var _ Admission = RateLimitHold{}

// HoldUntil is when the exhausted limit resets.
func (h RateLimitHold) HoldUntil(*request.Descriptor) time.Time { return h.Pacer.Until() }

// Settle reads the answer's rate-limit headers.
func (h RateLimitHold) Settle(_ *request.Descriptor, status int, hdr http.Header) {
	h.Pacer.Observe(status, hdr)
}
