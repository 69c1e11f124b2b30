package redisgate

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/gate"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisconn"
)

// BenchmarkAcquireRelease is what the shared gate adds to one request on
// an uncontended gate: Join (granted at once) and Release, against a real
// loopback Redis. It reports the p50 and p99 of the pair and the Redis
// round trips per request; compare gate's own BenchmarkLocal for the
// in-process gate.
func BenchmarkAcquireRelease(b *testing.B) {
	srv := redistest.Start(b)
	c, err := redisconn.Open(redisconn.Options{URL: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	g, err := New(c, "bench", 8)
	if err != nil {
		b.Fatal(err)
	}
	for range 100 { // warm: the scripts are loaded, the pool dialled
		tk := new(gate.Ticket)
		g.Join(tk)
		g.Release(tk, gate.Outcome{})
	}
	lat := make([]time.Duration, 0, b.N)
	calls := c.RoundTrips()
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		tk := new(gate.Ticket)
		g.Join(tk)
		<-tk.Ready()
		g.Release(tk, gate.Outcome{})
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(c.RoundTrips()-calls)/float64(len(lat)), "round-trips/op")
}
