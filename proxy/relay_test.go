package proxy

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/apierror"
)

func TestJSONRelayIsByteIdentical(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		up := startUpstream(t, apiHandler)
		_, px := startProxy(t, testConfig(t, up.URL, windowed))
		resp := post(t, px.URL, "/v1/messages", requestJSON)
		if got := readAll(t, resp.Body); got != messageJSON {
			t.Fatalf("body = %q; want %q", got, messageJSON)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status = %d; want 200", resp.StatusCode)
		}
		for k, want := range map[string]string{"Request-Id": "req_upstream_1", "Anthropic-Organization-Id": "org-1", "Content-Type": "application/json"} {
			if got := resp.Header.Get(k); got != want {
				t.Errorf("response header %s = %q; want %q", k, got, want)
			}
		}
	})
}

func TestSSERelayIsByteIdenticalAndFlushedPerEvent(t *testing.T) {
	bothModes(t, func(t *testing.T, windowed bool) {
		// The upstream sends one event, then waits until the client has
		// read it: a relay that buffers instead of flushing per event
		// deadlocks here (and the test times out).
		next := make(chan struct{})
		up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			w.Header().Set("Request-Id", "req_upstream_s")
			for _, ev := range sseEvents {
				io.WriteString(w, ev)
				w.(http.Flusher).Flush()
				<-next
			}
		})
		_, px := startProxy(t, testConfig(t, up.URL, windowed))
		resp := post(t, px.URL, "/v1/messages", streamRequestJSON)
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
			t.Fatalf("content-type = %q", ct)
		}
		br := bufio.NewReader(resp.Body)
		var got strings.Builder
		for i := range sseEvents {
			ev := readEvent(t, br)
			if ev != sseEvents[i] {
				t.Fatalf("event %d = %q; want %q", i, ev, sseEvents[i])
			}
			got.WriteString(ev)
			next <- struct{}{}
		}
		if rest := readAll(t, br); rest != "" {
			t.Fatalf("trailing bytes after the last event: %q", rest)
		}
		if got.String() != strings.Join(sseEvents, "") {
			t.Fatal("stream differs from upstream's")
		}
	})
}

// readEvent reads one SSE event, up to and including its blank line.
func readEvent(t *testing.T, br *bufio.Reader) string {
	t.Helper()
	var ev strings.Builder
	for {
		line, err := br.ReadString('\n')
		ev.WriteString(line)
		if err != nil {
			t.Fatalf("read event: %v (so far %q)", err, ev.String())
		}
		if line == "\n" {
			return ev.String()
		}
	}
}

func TestHeadersPassThroughBothWays(t *testing.T) {
	type seen struct {
		header http.Header
		query  string
		host   string
	}
	for _, auth := range []struct{ name, key, value, version string }{
		{"x-api-key", "X-Api-Key", "sk-ant-v1", "2023-06-01"},
		{"bearer", "Authorization", "Bearer sk-ant-v2", "2026-10-21"},
	} {
		bothModes(t, func(t *testing.T, windowed bool) {
			t.Run(auth.name, func(t *testing.T) {
				var mu sync.Mutex
				var got seen
				up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					got = seen{r.Header.Clone(), r.URL.RawQuery, r.Host}
					mu.Unlock()
					w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "49")
					w.Header().Set("Retry-After", "3")
					w.Header().Set("Connection", "X-Hop")
					w.Header().Set("X-Hop", "must not pass")
					writeMessage(w)
				})
				_, px := startProxy(t, testConfig(t, up.URL, windowed))
				req, _ := http.NewRequest(http.MethodPost, px.URL+"/v1/messages?beta=true", strings.NewReader(requestJSON))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(auth.key, auth.value)
				req.Header.Set("Anthropic-Version", auth.version)
				req.Header.Set("Anthropic-Beta", "prompt-caching-2024-07-31,token-efficient-tools-2025-02-19")
				req.Header.Set("X-Stainless-Retry-Count", "0")
				req.Header.Set("X-Stainless-Timeout", "600")
				req.Header.Set("User-Agent", "Anthropic/Go 2.15.0")
				req.Header.Set("Connection", "X-Client-Hop")
				req.Header.Set("X-Client-Hop", "must not pass")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				io.Copy(io.Discard, resp.Body)

				mu.Lock()
				defer mu.Unlock()
				for k, want := range map[string]string{
					auth.key: auth.value, "Anthropic-Version": auth.version,
					"Anthropic-Beta":          "prompt-caching-2024-07-31,token-efficient-tools-2025-02-19",
					"X-Stainless-Retry-Count": "0", "X-Stainless-Timeout": "600",
					"User-Agent": "Anthropic/Go 2.15.0", "Content-Type": "application/json",
				} {
					if v := got.header.Get(k); v != want {
						t.Errorf("upstream saw %s = %q; want %q", k, v, want)
					}
				}
				if v := got.header.Get("X-Client-Hop"); v != "" {
					t.Errorf("hop-by-hop header named by Connection reached upstream: %q", v)
				}
				if got.query != "beta=true" {
					t.Errorf("upstream query = %q; want beta=true", got.query)
				}
				if want := strings.TrimPrefix(up.URL, "http://"); got.host != want {
					t.Errorf("upstream Host = %q; want %q", got.host, want)
				}
				for k, want := range map[string]string{"Anthropic-Ratelimit-Requests-Remaining": "49", "Retry-After": "3", "X-Hop": ""} {
					if v := resp.Header.Get(k); v != want {
						t.Errorf("client saw %s = %q; want %q", k, v, want)
					}
				}
			})
		})
	}
}

func TestUpstreamErrorPassesThroughUnchanged(t *testing.T) {
	const body = `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_u"}`
	bothModes(t, func(t *testing.T, windowed bool) {
		up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After-Ms", "250")
			w.WriteHeader(529)
			io.WriteString(w, body)
		})
		_, px := startProxy(t, testConfig(t, up.URL, windowed))
		resp := post(t, px.URL, "/v1/messages", streamRequestJSON)
		if resp.StatusCode != 529 || resp.Header.Get("Retry-After-Ms") != "250" {
			t.Fatalf("status %d retry-after-ms %q; want 529 and 250", resp.StatusCode, resp.Header.Get("Retry-After-Ms"))
		}
		if got := readAll(t, resp.Body); got != body {
			t.Fatalf("body = %q; want %q", got, body)
		}
	})
}

func TestOtherPathsArePlainRelayed(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/messages/count_tokens":
			io.WriteString(w, `{"input_tokens":14}`)
		case "/v1/models":
			io.WriteString(w, `{"data":[],"has_more":false,"first_id":null,"last_id":null}`)
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"type":"error","error":{"type":"not_found_error","message":"nope"}}`)
		}
	})
	// Capacity 1 with a long window: if these were windowed they would
	// wait; the plain relay answers at once.
	_, px := startProxy(t, testConfig(t, up.URL, true))
	resp := post(t, px.URL, "/v1/messages/count_tokens", requestJSON)
	if got := readAll(t, resp.Body); got != `{"input_tokens":14}` {
		t.Fatalf("count_tokens body = %q", got)
	}
	r2, err := http.Get(px.URL + "/v1/models?limit=5")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	if got := readAll(t, r2.Body); !strings.Contains(got, `"has_more":false`) {
		t.Fatalf("models body = %q", got)
	}
	r3 := post(t, px.URL, "/v1/nothing/here", `{}`)
	if r3.StatusCode != 404 {
		t.Fatalf("unknown path status = %d; want the upstream's 404", r3.StatusCode)
	}
	var e apierror.Body
	json.NewDecoder(r3.Body).Decode(&e)
	if e.Error.Type != "not_found_error" {
		t.Fatalf("unknown path error = %+v", e)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"POST /v1/messages/count_tokens", "GET /v1/models?limit=5", "POST /v1/nothing/here"}
	if strings.Join(paths, "|") != strings.Join(want, "|") {
		t.Fatalf("upstream saw %q; want %q", paths, want)
	}
}

func TestUpstreamPathPrefixIsKept(t *testing.T) {
	var got atomic.Value
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.RequestURI())
		writeMessage(w)
	})
	bothModes(t, func(t *testing.T, windowed bool) {
		_, px := startProxy(t, testConfig(t, up.URL+"/gateway/anthropic", windowed))
		post(t, px.URL, "/v1/messages?beta=true", requestJSON)
		if got.Load() != "/gateway/anthropic/v1/messages?beta=true" {
			t.Fatalf("upstream saw %q", got.Load())
		}
	})
}
