package web

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// watchLive opens GET /ui/api/live and, when it is a 200, reads its first
// event; the caller closes the body.
func watchLive(t *testing.T, ctx context.Context, base string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ui/api/live", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "event: live\n" {
			t.Fatalf("first line of the live feed: %q, %v", line, err)
		}
	}
	return resp
}

func TestLiveViewWatchersAreBounded(t *testing.T) {
	const max = 3
	srv := httptest.NewServer(New(Options{Live: NewLive(nil), MaxWatchers: max}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open []*http.Response
	for range max {
		resp := watchLive(t, ctx, srv.URL)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("watcher %d of %d: %d; want 200", len(open)+1, max, resp.StatusCode)
		}
		open = append(open, resp)
	}
	resp := watchLive(t, ctx, srv.URL)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		json.Unmarshal(body, &e) != nil || e.Type != "error" || e.Error.Type != "overloaded_error" || !strings.Contains(e.Error.Message, "LIVE_MAX_WATCHERS=3") {
		t.Fatalf("one watcher past the bound: %d %s (retry-after %q); want 503 overloaded_error naming LIVE_MAX_WATCHERS, with retry-after",
			resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	// A watcher that leaves makes room for another.
	open[0].Body.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		resp := watchLive(t, ctx, srv.URL)
		ok := resp.StatusCode == http.StatusOK
		if ok {
			open[0] = resp
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("a watcher that left did not make room for another")
		}
	}
	for _, r := range open {
		r.Body.Close()
	}
}

func TestBenchRunsFromThePageCanBeTurnedOff(t *testing.T) {
	srv := httptest.NewServer(New(Options{NoRuns: true}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/ui/api/run", "application/json", strings.NewReader(`{"burst":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `"permission_error"`) || !strings.Contains(string(body), "UI_BENCH_RUNS") {
		t.Fatalf("POST /ui/api/run with runs off: %d %s; want 403 permission_error naming UI_BENCH_RUNS", resp.StatusCode, body)
	}
	// The page itself is still served.
	if resp, err := http.Get(srv.URL + "/ui/"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /ui/ with runs off: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
