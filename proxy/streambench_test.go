package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// benchStream is an answer of 20 events, as the API streams a short one.
var benchStream = func() []string {
	evs := []string{sseEvents[0], sseEvents[1]}
	for range 16 {
		evs = append(evs, sseEvents[3])
	}
	return append(evs, sseEvents[5:]...)
}()

// BenchmarkStreamRelay relays one stream at a time of 20 events, over
// keep-alive loopback connections, directly and through sluice on each
// path, with the upstream flushing every event on its own (apart: each a
// read of its own for sluice) or the whole answer at once (together: many
// events in one read). cpu-µs/op is this process's CPU per stream (client,
// upstream and sluice), writes/op its write system calls (where a flush
// per event shows): the difference from direct's is sluice's. Run:
//
//	go test -run '^$' -bench StreamRelay -benchmem -benchtime 2000x ./proxy/
func BenchmarkStreamRelay(b *testing.B) {
	for _, pace := range []string{"apart", "together"} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range benchStream {
				io.WriteString(w, ev)
				if pace == "apart" {
					w.(http.Flusher).Flush()
				}
			}
		}))
		target := func(b *testing.B, windowed bool) string {
			cfg := config.Default()
			cfg.Enabled = windowed
			cfg.UpstreamURL = mustURL(b, up.URL)
			return serveBench(b, cfg, Options{Logger: benchLogger})
		}
		for _, tc := range []struct {
			name string
			url  func(b *testing.B) string
		}{
			{"direct", func(*testing.B) string { return up.URL }},
			{"plain", func(b *testing.B) string { return target(b, false) }},
			{"windowed", func(b *testing.B) string { return target(b, true) }},
		} {
			b.Run(pace+"/"+tc.name, func(b *testing.B) {
				url := tc.url(b) + "/v1/messages"
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
				defer client.CloseIdleConnections()
				want := len(strings.Join(benchStream, ""))
				cpu0, w0 := cpuTime(), writeCalls()
				for b.Loop() {
					req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(streamRequestJSON))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Api-Key", benchKey)
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, bufio.NewReader(resp.Body))
					resp.Body.Close()
					if int(n) != want {
						b.Fatalf("%d bytes relayed; want %d", n, want)
					}
				}
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
				if w := writeCalls(); w >= 0 {
					b.ReportMetric(float64(w-w0)/float64(b.N), "writes/op")
				}
			})
		}
		up.Close()
	}
}

// cpuTime is this process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeCalls is this process's count of write system calls so far, from
// /proc/self/io; -1 where there is none.
func writeCalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// serveBench serves a proxy for cfg on loopback, as sluice serve does
// (proxy.Server), and returns its URL.
func serveBench(b *testing.B, cfg config.Config, opt Options) string {
	p, err := newProxy(b, cfg, opt)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	stop := (&Server{Proxy: p}).Start(ln)
	b.Cleanup(func() { stop() })
	return "http://" + ln.Addr().String()
}
