package proxy

// The table of upstream keys' buckets under many keys.

import (
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/sim"
)

// The key buckets keep at most pace.DefaultMaxKeys keys. A client that
// sends one request with each of 256 made-up keys pushed out, least
// recently used first, what sluice learned of another client's key: that
// key's next request was no longer held for its spent bucket, and met a
// 429. Now the key whose loss costs least goes: a spent one is kept.
func TestMadeUpKeysDoNotEvictASpentKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := sim.New(sim.Config{TTFT: 50 * time.Millisecond, PerToken: time.Millisecond, RequestsPerMinute: 2})
		t.Cleanup(s.Close)
		rig := newBubbleRig(t, true, s.ServeHTTP, func(c *config.Config) { c.RetryMaxAttempts = 1 })
		c := newTenantClient(t, rig)
		c.send("v1", "sk-victim")
		c.answer("v1") // the victim's buckets are learned: one request's worth left
		c.send("v2", "sk-victim")
		c.answer("v2") // spent
		for i := range 256 {
			c.send(fmt.Sprint("m", i), fmt.Sprint("sk-made-up-", i))
			if i%32 == 31 {
				c.wg.Wait()
			}
		}
		c.wg.Wait()
		c.send("v3", "sk-victim")
		if a := c.answer("v3"); a.status != http.StatusOK {
			t.Errorf("the victim's request after 256 made-up keys: %d %.100s; want it held until its bucket refills, then 200", a.status, a.body)
		}
		if n := s.Stats().ByStatus["429"]; n != 0 {
			t.Errorf("the upstream answered %d 429s: sluice forgot the victim's spent bucket", n)
		}
	})
}
