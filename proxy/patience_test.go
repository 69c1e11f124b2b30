package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
)

func TestRequestThatWouldOutwaitItsClientIsShedWithRetryAfter(t *testing.T) {
	for _, admit := range []bool{true, false} {
		name := map[bool]string{true: "admission on", false: "admission off"}[admit]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				release := make(chan struct{})
				rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					if calls.Add(1) == 1 {
						time.Sleep(2 * time.Second) // teaches sluice that a call takes 2 s
					} else {
						<-release
					}
					writeMessage(w)
				}, func(c *config.Config) { c.MaxConcurrency = 1; c.AdmitByClientTimeout = admit })

				send := func(timeout string) (*http.Response, error) {
					req, _ := http.NewRequest(http.MethodPost, rig.url+"/v1/messages", strings.NewReader(requestJSON))
					req.Header.Set("X-Stainless-Timeout", timeout)
					return rig.client.Do(req)
				}
				resp, err := send("600")
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("first request: %v %v", resp, err)
				}
				resp.Body.Close()

				// One in flight and three waiting for the one slot.
				done := make(chan int, 4)
				for range 4 {
					go func() {
						resp, err := send("600")
						if err != nil {
							done <- -1
							return
						}
						resp.Body.Close()
						done <- resp.StatusCode
					}()
					time.Sleep(10 * time.Millisecond) // (virtual) its window closes
				}
				if q := rig.proxy.Queued(); q != 3 {
					t.Fatalf("queued = %d; want 3", q)
				}

				// A client that will wait 5 s would wait 4 × 2 s for the slot.
				impatient := make(chan *http.Response, 1)
				go func() {
					resp, err := send("5")
					if err != nil {
						t.Error(err)
					}
					impatient <- resp
				}()
				time.Sleep(10 * time.Millisecond)
				if admit {
					resp := <-impatient
					defer resp.Body.Close()
					wantError(t, resp, 429, "rate_limit_error", "x-stainless-timeout")
					if ra := resp.Header.Get("Retry-After"); ra != "8" {
						t.Errorf("retry-after = %q; want 8 (the expected wait in seconds)", ra)
					}
					if q := rig.proxy.Queued(); q != 3 {
						t.Errorf("queued = %d after shedding; want 3", q)
					}
				} else if q := rig.proxy.Queued(); q != 4 {
					t.Errorf("queued = %d with admission off; want the impatient one queued too", q)
				}
				close(release)
				for range 4 {
					if s := <-done; s != 200 {
						t.Errorf("a patient request got %d", s)
					}
				}
				if !admit {
					resp := <-impatient
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Errorf("with admission off the impatient request got %d; want it served", resp.StatusCode)
					}
				}
			})
		})
	}
}
