package redisshare

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/dispatch/cacheaware"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/pace"
	"github.com/sluicehq/sluice/redisconn"
)

// benchClient is a client of a real loopback Redis, closed when b ends.
func benchClient(b *testing.B) *redisconn.Client {
	srv := redistest.Start(b)
	c, err := redisconn.Open(redisconn.Options{URL: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// benchLoop times f b.N times and reports its p50, p99 and Redis round
// trips per call.
func benchLoop(b *testing.B, c *redisconn.Client, f func(i int)) {
	for i := range 100 { // warm: the scripts are loaded, the pool dialled
		f(-1 - i)
	}
	lat := make([]time.Duration, 0, b.N)
	calls := c.RoundTrips()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		start := time.Now()
		f(i)
		i++
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(c.RoundTrips()-calls)/float64(len(lat)), "round-trips/op")
}

// BenchmarkSharedBuckets is what the shared buckets add to one request:
// its Take, the Observe of its answer's headers and the Correct of its
// usage, against a real loopback Redis (compare pace's in-process ones).
func BenchmarkSharedBuckets(b *testing.B) {
	c := benchClient(b)
	bs := NewBuckets(c, "bench")
	h := limits(1e9, 1e9, 1e9, 1e9)
	bs.Observe("k", pace.Debit{}, 200, h, time.Now())
	cost := pace.Cost{Input: 1000, Output: 256}
	benchLoop(b, c, func(int) {
		now := time.Now()
		d, ok, _ := bs.Take("k", cost, now)
		if !ok {
			b.Fatal("refused")
		}
		bs.Observe("k", d, 200, h, now)
		bs.Correct(d, pace.Cost{Input: 900, Output: 100}, now)
	})
}

// BenchmarkSharedCacheGroup is what the shared cache groups add to a wave
// with a cold prefix: its claim and, once the leader's response begins,
// the begun that marks it warm and tells the other replicas.
func BenchmarkSharedCacheGroup(b *testing.B) {
	c := benchClient(b)
	g := NewCacheGroups(c, "bench")
	benchLoop(b, c, func(i int) {
		p := []cacheaware.SharedPrefix{{Key: uint64(i + 1000), TTL: 5 * time.Minute}}
		if cl := g.Claim(p, 5*time.Second); cl[0] != cacheaware.ClaimLead {
			b.Fatal("a cold prefix was not claimed")
		}
		g.Begun(p, nil)
	})
}
