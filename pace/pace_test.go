package pace

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

func TestObserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		at := func(d time.Duration) string { return now.Add(d).UTC().Format(time.RFC3339) }
		for _, tc := range []struct {
			name   string
			status int
			h      map[string]string
			want   time.Duration // hold from now; 0 for none
		}{
			{"nothing exhausted", 200, map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "3", "Anthropic-Ratelimit-Requests-Reset": at(5 * time.Second)}, 0},
			{"requests exhausted", 200, map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "0", "Anthropic-Ratelimit-Requests-Reset": at(5 * time.Second)}, 5 * time.Second},
			{"latest reset of several wins", 200, map[string]string{
				"Anthropic-Ratelimit-Tokens-Remaining": "0", "Anthropic-Ratelimit-Tokens-Reset": at(7 * time.Second),
				"Anthropic-Ratelimit-Output-Tokens-Remaining": "0", "Anthropic-Ratelimit-Output-Tokens-Reset": at(9 * time.Second),
				"Anthropic-Ratelimit-Input-Tokens-Remaining": "0", "Anthropic-Ratelimit-Input-Tokens-Reset": at(2 * time.Second)}, 9 * time.Second},
			{"reset in the past", 200, map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "0", "Anthropic-Ratelimit-Requests-Reset": at(-time.Second)}, 0},
			{"bad reset", 200, map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "0", "Anthropic-Ratelimit-Requests-Reset": "soon"}, 0},
			{"429 retry-after", 429, map[string]string{"Retry-After": "4"}, 4 * time.Second},
			{"capped at MaxHold", 200, map[string]string{"Anthropic-Ratelimit-Tokens-Remaining": "0", "Anthropic-Ratelimit-Tokens-Reset": at(time.Hour)}, time.Minute},
		} {
			var p Pacer
			h := http.Header{}
			for k, v := range tc.h {
				h.Set(k, v)
			}
			p.Observe(tc.status, h)
			got := time.Duration(0)
			if u := p.Until(); !u.IsZero() {
				got = u.Sub(now)
			}
			if got != tc.want {
				t.Errorf("%s: hold %v; want %v", tc.name, got, tc.want)
			}
		}
	})
}
