package pace

import (
	"net/http"
	"strconv"
)

// Reading the anthropic-ratelimit-* headers.

// HeaderInt is header name of h as a count: false when absent or not a
// whole number >= 0.
func HeaderInt(h http.Header, name string) (float64, bool) {
	return headerInt(h, http.CanonicalHeaderKey(name))
}

// kindHeaders are each kind's header names, canonical, made once: Observe
// runs on every answer, and building and canonicalizing six names there
// was most of its cost.
var kindHeaders = func() (names [numKinds]struct{ limit, remaining, reset string }) {
	for kind := range numKinds {
		prefix := "Anthropic-Ratelimit-" + kindNames[kind]
		names[kind].limit = http.CanonicalHeaderKey(prefix + "-Limit")
		names[kind].remaining = http.CanonicalHeaderKey(prefix + "-Remaining")
		names[kind].reset = http.CanonicalHeaderKey(prefix + "-Reset")
	}
	return names
}()

// hasLimits reports whether h carries any of the rate-limit headers.
func hasLimits(h http.Header) bool {
	for kind := range numKinds {
		if headerOf(h, kindHeaders[kind].remaining) != "" {
			return true
		}
	}
	return false
}

// headerOf is h.Get(name) for a canonical name.
func headerOf(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// headerInt is the whole number >= 0 that h's canonical header name holds.
func headerInt(h http.Header, name string) (float64, bool) {
	v := headerOf(h, name)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return float64(n), true
}
