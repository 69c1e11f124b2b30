package proxy

// The upstream's retry-after, read for the retry decision.

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
)

// An upstream (or a gateway before it) that answers 529 with an absurd
// retry-after, 317 years, means: do not retry within this deadline. The
// conversion to a Duration overflowed to a negative wait, and sluice
// retried at once, RETRY_MAX_ATTEMPTS times; retry.After now caps it.
func TestAbsurdRetryAfterIsNotRetriedAtOnce(t *testing.T) {
	for _, v := range []string{"1e10", "Inf"} {
		t.Run(v, func(t *testing.T) {
			var calls atomic.Int32
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				w.Header().Set("Retry-After", v)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(529)
				fmt.Fprint(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			})
			_, srv := startProxy(t, testConfig(t, up.URL, true))
			resp := post(t, srv.URL, "/v1/messages", requestJSON)
			readAll(t, resp.Body)
			if n := calls.Load(); n != 1 {
				t.Errorf("retry-after: %s: the upstream was called %d times; want 1 (a wait past the deadline is not retried)", v, n)
			}
		})
	}
}
