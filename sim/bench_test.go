package sim

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkSimSmallRequest measures small non-streaming Messages requests at
// zero latency through real loopback HTTP, in parallel. Run it on two cores:
//
//	go test ./sim/ -run '^$' -bench BenchmarkSimSmallRequest -cpu 2 -benchtime 5s
func BenchmarkSimSmallRequest(b *testing.B) {
	s := New(Config{})
	ts := httptest.NewServer(s)
	defer s.Close()
	defer ts.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", ts.URL+"/v1/messages", strings.NewReader(helloBody))
			req.Header.Set("x-api-key", "k")
			req.Header.Set("anthropic-version", "2023-06-01")
			req.Header.Set("x-sim-output-tokens", "16")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
