package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/memnet"
	"github.com/sluicehq/sluice/upstream"
)

// /readyz answers 200 while sluice serves and 503 from the signal on,
// while /healthz stays 200: through SHUTDOWN_DELAY_S sluice still accepts
// and serves, so a load balancer's probe sees the 503 and takes it out of
// rotation, and a liveness check does not kill it mid-drain; then it stops
// accepting and drains as before.
func TestReadyzTurns503AtTheSignalAndTheDrainWaitsTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		upLn := memnet.NewListener()
		upSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			if r.Header.Get("X-Hold") != "" {
				<-release // holds the drain open
			}
			writeMessage(w)
		})}
		go upSrv.Serve(upLn)
		defer upSrv.Close()
		cfg := testConfig(t, "http://upstream.test", true)
		p, err := newProxy(t, cfg, Options{Upstream: upstream.New(cfg.UpstreamURL, upstream.Options{DialContext: upLn.Dial}), Logger: quietLog})
		if err != nil {
			t.Fatal(err)
		}
		pxLn := memnet.NewListener()
		ctx, stop := context.WithCancel(context.Background())
		served := make(chan error, 1)
		const delay = 5 * time.Second
		go func() {
			served <- (&Server{Proxy: p, ShutdownDelay: delay, DrainTimeout: 30 * time.Second, Log: quietLog}).Serve(ctx, pxLn)
		}()
		tr := &http.Transport{DialContext: pxLn.Dial}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		send := func(hold bool) int {
			req, _ := http.NewRequest(http.MethodPost, "http://sluice.test/v1/messages", strings.NewReader(requestJSON))
			if hold {
				req.Header.Set("X-Hold", "1")
			}
			resp, err := client.Do(req)
			if err != nil {
				return -1
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}

		if status, body := probe(client, "/readyz"); status != 200 || body != `{"status":"ready"}` {
			t.Errorf("serving: /readyz = %d %s; want 200 ready", status, body)
		}
		held := make(chan int, 1)
		go func() { held <- send(true) }()
		synctest.Wait()
		signalled := time.Now()
		stop()
		synctest.Wait()
		// Within the delay: new connections are still accepted and served.
		tr.CloseIdleConnections()
		status, body := probe(client, "/readyz")
		var v struct{ Status, Message string }
		if status != 503 || json.Unmarshal([]byte(body), &v) != nil || v.Status != "draining" || !strings.Contains(v.Message, "shutting down") {
			t.Errorf("signalled: /readyz = %d %s; want 503 with a JSON status and message", status, body)
		}
		if status, body := probe(client, "/healthz"); status != 200 {
			t.Errorf("signalled: /healthz = %d %s; want 200 (liveness)", status, body)
		}
		if s := send(false); s != 200 {
			t.Errorf("a request within the delay got %d; want it served", s)
		}
		// Past the delay: the listener is closed, the held request drains.
		time.Sleep(delay - time.Since(signalled) + time.Millisecond)
		tr.CloseIdleConnections()
		if _, err := pxLn.Dial(context.Background(), "tcp", "sluice.test"); err == nil {
			t.Error("still accepting connections after the shutdown delay")
		}
		select {
		case s := <-held:
			t.Fatalf("the request in flight at the signal ended (%d) before its upstream answered", s)
		default:
		}
		close(release)
		if s := <-held; s != 200 {
			t.Errorf("the request in flight at the signal got %d; want 200", s)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

// probe GETs path on the proxy at sluice.test; -1 if it got no answer.
func probe(client *http.Client, path string) (int, string) {
	resp, err := client.Get("http://sluice.test" + path)
	if err != nil {
		return -1, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestProbesTakeOnlyGetAndHead(t *testing.T) {
	_, px := startProxy(t, testConfig(t, "http://127.0.0.1:1", false))
	for _, path := range []string{"/readyz", "/healthz"} {
		resp := post(t, px.URL, path, "{}")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST %s = %d, Allow %q; want 405 with Allow: GET, HEAD", path, resp.StatusCode, resp.Header.Get("Allow"))
		}
		req, _ := http.NewRequest(http.MethodHead, px.URL+path, nil)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
			t.Errorf("HEAD %s = %v, %v; want 200", path, resp, err)
		}
	}
}

// GET / is answered by sluice with where to go, instead of being relayed;
// any other method on /, and any other path, still is.
func TestRootPointsToThePageAndTheDocs(t *testing.T) {
	var relayed atomic.Int32
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		relayed.Add(1)
		w.WriteHeader(http.StatusTeapot)
	})
	for _, ui := range []bool{true, false} {
		_, px := startProxy(t, testConfig(t, up.URL, false, func(c *config.Config) { c.UIEnabled = ui }))
		resp, err := http.Get(px.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]string
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || v["docs"] != docsURL || v["ready"] != "/readyz" || !strings.Contains(v["message"], "base URL") {
			t.Errorf("UI_ENABLED=%v: GET / = %d %v (%v); want the pointer", ui, resp.StatusCode, v, err)
		}
		if ui && v["ui"] != "/ui/" {
			t.Errorf("UI_ENABLED=1: GET / points to ui %q; want /ui/", v["ui"])
		}
		if _, ok := v["ui"]; !ui && ok {
			t.Errorf("UI_ENABLED=0: GET / points to a page that is off: %v", v)
		}
		if relayed.Load() != 0 {
			t.Errorf("GET / reached the upstream")
		}
		if resp := post(t, px.URL, "/", "{}"); resp.StatusCode != http.StatusTeapot {
			t.Errorf("POST / = %d; want it relayed (418 from the upstream)", resp.StatusCode)
		}
		if resp, err := http.Get(px.URL + "/anything"); err != nil || resp.StatusCode != http.StatusTeapot {
			t.Errorf("GET /anything = %v, %v; want it relayed", resp, err)
		} else {
			resp.Body.Close()
		}
		relayed.Store(0)
	}
}
