package proxy

// An upstream that goes silent, or sends nothing but pings, on the
// relayed paths, the batch objects and the streams: cut after its timeout.

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
)

// An upstream stream that sends nothing but pings is ended after
// STREAM_IDLE_TIMEOUT_S with an in-band timeout_error, and its slot comes
// back: pings are not the upstream's progress, and 8 such streams held a
// gate of 8 for ever.
func TestPingOnlyStreamDoesNotHoldItsSlotForever(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, sseEvents[0])
			w.(http.Flusher).Flush()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(10 * time.Second):
					io.WriteString(w, "event: ping\ndata: {\"type\": \"ping\"}\n\n")
					w.(http.Flusher).Flush()
				}
			}
		}
		rig := newBubbleRig(t, true, up, func(c *config.Config) { c.MaxConcurrency = 1 })
		req, _ := http.NewRequest("POST", rig.url+"/v1/messages", strings.NewReader(streamRequestJSON))
		req.Header.Set("X-Api-Key", "sk-test")
		resp, err := rig.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		read := make(chan []byte)
		go func() {
			b, _ := io.ReadAll(resp.Body)
			read <- b
		}()
		var body []byte
		select {
		case body = <-read:
		case <-time.After(2 * time.Hour):
			resp.Body.Close()
			<-read
			t.Fatal("after 2 h of pings and nothing else, the stream has not ended")
		}
		resp.Body.Close()
		synctest.Wait()
		if st := rig.proxy.GateStats(); st.InFlight != 0 {
			t.Errorf("after a stream of pings, it still holds %d of %d slots", st.InFlight, st.Capacity)
		}
		if !strings.Contains(string(body), "event: error") || !strings.Contains(string(body), `"timeout_error"`) ||
			!strings.Contains(string(body), "no event but pings") {
			t.Errorf("the stream ended without an in-band timeout_error:\n%s", body)
		}
	})
}

// Pings between an answer's events do not end it: only a stretch of
// STREAM_IDLE_TIMEOUT_S with nothing but pings does. Each delta here comes
// 50 s after the one before (the timeout is 60 s) with pings between.
func TestPingsBetweenSlowEventsKeepNothingFromEnding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for i, ev := range sseEvents {
				if strings.HasPrefix(ev, "event: ping") {
					continue // sseEvents' own ping: the test's pings are below
				}
				if i > 0 {
					for range 5 {
						time.Sleep(10 * time.Second)
						io.WriteString(w, "event: ping\ndata: {\"type\": \"ping\"}\n\n")
						w.(http.Flusher).Flush()
					}
				}
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
			}
		}
		rig := newBubbleRig(t, true, up, func(c *config.Config) { c.StreamIdleTimeout = 60 * time.Second })
		req, _ := http.NewRequest("POST", rig.url+"/v1/messages", strings.NewReader(streamRequestJSON))
		req.Header.Set("X-Api-Key", "sk-test")
		resp, err := rig.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(body), "event: error") || !strings.Contains(string(body), "event: message_stop") {
			t.Errorf("a slow stream with pings between its events was cut:\n%s", body)
		}
	})
}

// README: on every relayed path "a body silent for STREAM_IDLE_TIMEOUT_S
// is cut". A batch object (GET or POST /v1/messages/batches...), which
// sluice reads whole to point its results_url at itself, was read with
// no watch at all: an upstream that sent its headers and then stalled
// held the client's request for as long as the upstream's connection
// stayed open.
func TestStalledBatchObjectIsCut(t *testing.T) {
	release := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"data":[{"id":"msgbatch_1","results_url":"https://api.anthropic.com/v1/messages/batches/msgbatch_1/results"`)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	_, px := startProxy(t, testConfig(t, up.URL, true, func(c *config.Config) { c.StreamIdleTimeout = 300 * time.Millisecond }))
	req, _ := http.NewRequest("GET", px.URL+"/v1/messages/batches", nil)
	req.Header.Set("X-Api-Key", "sk-test")
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET /v1/messages/batches from an upstream that stalls mid-body: %v; want an answer once STREAM_IDLE_TIMEOUT_S (300 ms) passes", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), `"api_error"`) {
		t.Errorf("stalled batch object: %d %s %v; want 502 api_error", resp.StatusCode, b, err)
	}
}

// A relayed path has an upstream response timeout: a hanging upstream no
// longer holds its client forever.
func TestRelayedPathTimesOutAHangingUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rig := newBubbleRig(t, true, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
		}, func(c *config.Config) { c.UpstreamTimeout = 3 * time.Second })
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, rig.url+"/v1/messages/count_tokens", strings.NewReader(requestJSON))
		resp, err := rig.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if took := time.Since(start); took != 3*time.Second {
			t.Errorf("answered after %v; want UPSTREAM_TIMEOUT_S, 3s", took)
		}
		wantError(t, resp, http.StatusGatewayTimeout, "timeout_error", "UPSTREAM_TIMEOUT_S")
	})
}
