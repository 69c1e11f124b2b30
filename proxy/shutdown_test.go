package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/memnet"
	"github.com/sluicehq/sluice/upstream"
)

// Abort cuts, with errShuttingDown, exactly the requests begun and not
// yet ended, whichever place in the list each had, and any begun after
// it; a request that ended is left alone, and Idle's count follows.
func TestAbortCutsTheRequestsBeingServed(t *testing.T) {
	p := &Proxy{}
	var f [4]inFlight
	ctx := make([]context.Context, len(f))
	for i := range f {
		ctx[i] = p.begin(context.Background(), &f[i])
	}
	p.end(&f[3]) // the head of the list
	p.end(&f[1]) // the middle
	p.end(&f[0]) // the tail
	if err := ctx[1].Err(); err == nil || context.Cause(ctx[1]) == errShuttingDown {
		t.Errorf("an ended request: %v, cause %v; want cancelled by its end, not by Abort", err, context.Cause(ctx[1]))
	}
	if n := p.active.Load(); n != 1 {
		t.Fatalf("%d active; want 1", n)
	}
	if ctx[2].Err() != nil {
		t.Fatal("a request being served was cut before Abort")
	}
	p.Abort()
	if context.Cause(ctx[2]) != errShuttingDown {
		t.Errorf("the request being served: cause %v; want errShuttingDown", context.Cause(ctx[2]))
	}
	if context.Cause(ctx[0]) == errShuttingDown || context.Cause(ctx[3]) == errShuttingDown {
		t.Error("Abort reached a request that had ended")
	}
	var late inFlight
	if c := p.begin(context.Background(), &late); context.Cause(c) != errShuttingDown {
		t.Errorf("a request begun after Abort: cause %v; want errShuttingDown at once", context.Cause(c))
	}
	p.end(&late)
	p.end(&f[2])
	if n := p.active.Load(); n != 0 || p.serving.head != nil {
		t.Errorf("%d active, list head %p after every end; want none", n, p.serving.head)
	}
}

// At the drain deadline nothing accepted ends without an answer: requests
// in line or in flight get 429 with retry-after, a stream that had begun
// gets an in-band error event.
func TestShutdownAnswersEveryAcceptedRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		upLn := memnet.NewListener()
		upSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(`"stream":true`)) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, sseEvents[0])
				w.(http.Flusher).Flush()
			}
			<-r.Context().Done() // then never finishes
		})}
		go upSrv.Serve(upLn)
		defer upSrv.Close()
		cfg := testConfig(t, "http://upstream.test", true, func(c *config.Config) { c.MaxConcurrency = 2 })
		p, err := newProxy(t, cfg, Options{Upstream: upstream.New(cfg.UpstreamURL, upstream.Options{DialContext: upLn.Dial}), Logger: quietLog, ParkWhenQueued: -1})
		if err != nil {
			t.Fatal(err)
		}
		pxLn := memnet.NewListener()
		ctx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- (&Server{Proxy: p, DrainTimeout: 2 * time.Second, Log: quietLog}).Serve(ctx, pxLn) }()
		tr := &http.Transport{DialContext: pxLn.Dial}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}

		type answer struct {
			status int
			retry  string
			body   []byte
			err    error
		}
		bodies := []string{streamRequestJSON, requestJSON, requestJSON, requestJSON, requestJSON, requestJSON}
		answers := make([]answer, len(bodies))
		var wg sync.WaitGroup
		for i, b := range bodies {
			wg.Go(func() {
				resp, err := client.Post("http://sluice.test/v1/messages", "application/json", strings.NewReader(b))
				if err != nil {
					answers[i].err = err
					return
				}
				answers[i].status, answers[i].retry = resp.StatusCode, resp.Header.Get("Retry-After")
				answers[i].body, answers[i].err = io.ReadAll(resp.Body)
				resp.Body.Close()
			})
			time.Sleep(5 * time.Millisecond) // in this order: the stream takes a slot first
		}
		if st := p.GateStats(); st.InFlight != 2 || st.Waiting != 4 {
			t.Errorf("before the signal: gate %+v; want 2 in flight and 4 in line", st)
		}
		start := time.Now()
		stop()
		wg.Wait()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if took := time.Since(start); took < 2*time.Second || took > 2*time.Second+abortGrace {
			t.Errorf("shutdown took %v; want the 2 s drain and at most the grace after it", took)
		}
		for i, a := range answers {
			switch {
			case a.err != nil:
				t.Errorf("request %d got no whole answer: %v", i, a.err)
			case i == 0:
				if a.status != 200 || lastEventError(a.body) != "overloaded_error" || !bytes.HasPrefix(a.body, []byte(sseEvents[0])) {
					t.Errorf("the stream: status %d, body %q; want its events, then an in-band overloaded_error", a.status, a.body)
				}
			default:
				if a.status != 429 || a.retry == "" || !bytes.Contains(a.body, []byte("shutting down")) || !bytes.Contains(a.body, []byte(`"rate_limit_error"`)) {
					t.Errorf("request %d: status %d, retry-after %q, body %s; want 429 rate_limit_error shutting down with retry-after", i, a.status, a.retry, a.body)
				}
			}
		}
	})
}
