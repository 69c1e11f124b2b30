// Package redisgate is a gate.Gate shared by every sluice replica that
// points at one Redis: one cap across the fleet, granted in global arrival
// order. Slots are leases that a replica's heartbeat renews, so a crashed
// replica's slots come back within the lease TTL; acquire and release are
// Lua scripts, atomic in Redis; a grant to a ticket of another replica
// reaches it by pub/sub. When Redis cannot be reached within a short
// timeout, each replica falls back to a local cap of ⌈cap ÷ replicas⌉ and
// returns to the shared gate when Redis answers again. docs/scaling.md
// tells how to run it and how far it carries.
package redisgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Options configure a Client.
type Options struct {
	// URL is the Redis to share gates through: redis://[:password@]host:port[/db],
	// rediss:// for TLS, or unix:///path. A password in it never reaches a
	// log, a metric or an error.
	URL string
	// Timeout bounds every Redis call a request waits on. If zero, 100 ms.
	Timeout time.Duration
	// LeaseTTL bounds how long a dead replica's slots stay taken: each
	// heartbeat (every LeaseTTL/4) renews its leases for 0.7 × LeaseTTL,
	// and the next heartbeat or script of any other replica, at most
	// LeaseTTL/4 after they end, reaps them. If zero, 5 s.
	LeaseTTL time.Duration
	// Replicas, if positive, is the fleet's size for the fallback cap;
	// if zero, the replicas alive in Redis when it was last reached.
	Replicas int
	// Logger hears of each fallback and each return. If nil, slog.Default.
	Logger *slog.Logger
}

// Client is one replica's connection to the shared gates: the Redis
// client, the subscription its grants arrive on, and the heartbeat. One
// per process; its gates are made with Gate.
type Client struct {
	opt      Options
	rdb      *redis.Client
	ps       *redis.PubSub
	replica  string // this replica's id in Redis
	secret   string // the URL's password, scrubbed from every error text
	log      *slog.Logger
	addr     string        // the URL, redacted, for logs
	interval time.Duration // between heartbeats: LeaseTTL/4
	lease    time.Duration // how long each renewal lasts: 0.7 × LeaseTTL

	mu       sync.Mutex
	gates    map[string]*Gate            // by grant channel
	handlers map[string]func(msg string) // the other channels': the shared cache groups'
	ticks    []func()                    // called on each heartbeat tick: the other parts' probes
	parts    []*outage                   // the shared parts other than the gates, for the gauge

	calls    atomic.Int64 // Redis round trips made, for the tests and the bench
	errors   atomic.Int64
	fallback atomic.Int32 // gates now on their local fallback cap
	replicas atomic.Int32 // replicas last seen alive in Redis

	stop  chan struct{}
	done  sync.WaitGroup
	close sync.Once
}

// Open connects to opt.URL. It fails only on a bad URL: a Redis that does
// not answer yet leaves the gates on their fallback cap until it does.
// Call Close when done.
func Open(opt Options) (*Client, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = 100 * time.Millisecond
	}
	if opt.LeaseTTL <= 0 {
		opt.LeaseTTL = 5 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	u, err := url.Parse(opt.URL)
	if err != nil {
		return nil, errors.New("redisgate: REDIS_URL is not a URL")
	}
	ro, err := redis.ParseURL(opt.URL)
	if err != nil {
		return nil, fmt.Errorf("redisgate: REDIS_URL %s: %s", u.Redacted(), scrub(err.Error(), password(u)))
	}
	// Every call is bounded by its context (opt.Timeout): no retries, one
	// dial attempt, and sockets that give up as soon.
	ro.MaxRetries = -1
	ro.DialerRetries = 1
	ro.DialTimeout = opt.Timeout
	ro.ReadTimeout = opt.Timeout
	ro.WriteTimeout = opt.Timeout
	ro.ContextTimeoutEnabled = true
	ro.PoolTimeout = opt.Timeout
	ro.DisableIdentity = true
	ro.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	if ro.PoolSize < 64 {
		ro.PoolSize = 64
	}
	// go-redis logs every failed dial; the gate logs an outage once.
	redis.SetLogger(&logging.VoidLogger{})
	id := make([]byte, 6)
	rand.Read(id)
	c := &Client{opt: opt, rdb: redis.NewClient(ro), replica: hex.EncodeToString(id), secret: password(u),
		log: opt.Logger, addr: Redacted(opt.URL), interval: opt.LeaseTTL / 4, lease: opt.LeaseTTL * 7 / 10, gates: map[string]*Gate{}, stop: make(chan struct{})}
	c.ps = c.rdb.Subscribe(context.Background())
	msgs := c.ps.Channel(redis.WithChannelSize(1024))
	c.done.Add(2)
	go c.receive(msgs)
	go c.beat()
	return c, nil
}

// Redacted is rawURL with its password hidden, for a log; text that is no
// URL is not shown at all.
func Redacted(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(not shown)"
	}
	return u.Redacted()
}

// password is u's password, or "".
func password(u *url.URL) string {
	if u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

// scrub hides secret in text.
func scrub(text, secret string) string {
	if secret == "" {
		return text
	}
	return strings.ReplaceAll(text, secret, "xxxxx")
}

// errText is err's text for a log, without the password.
func (c *Client) errText(err error) string { return scrub(err.Error(), c.secret) }

// Replica is this replica's id in Redis.
func (c *Client) Replica() string { return c.replica }

// RoundTrips is how many Redis calls the client has made: scripts,
// heartbeats and probes, not the pub/sub messages it received.
func (c *Client) RoundTrips() int64 { return c.calls.Load() }

// Gate returns the shared gate called name (every replica that names the
// same gate shares its cap), of capacity slots. It is registered with
// Redis now if Redis answers, and on the next heartbeat otherwise.
func (c *Client) Gate(name string, capacity int) (*Gate, error) {
	return c.open(name, capacity, false)
}

// FairGate is Gate in the fair order across tenants (GATE_ORDER=fair):
// its line is scored by each ticket's start tag, reckoned in Redis from
// each tenant's finish tag, so that one tenant's burst on one replica
// cannot starve another tenant on another (docs/scaling.md).
func (c *Client) FairGate(name string, capacity int) (*Gate, error) {
	return c.open(name, capacity, true)
}

func (c *Client) open(name string, capacity int, fair bool) (*Gate, error) {
	if capacity < 1 {
		return nil, errors.New("gate: capacity must be at least 1")
	}
	g := newGate(c, name, capacity)
	g.fair = fair
	c.mu.Lock()
	if _, dup := c.gates[g.channel+c.replica]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("redisgate: gate %q opened twice", name)
	}
	c.gates[g.channel+c.replica] = g
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.Timeout)
	err := c.ps.Subscribe(ctx, g.channel+c.replica) // remembered, and renewed on reconnect, even if it fails now
	cancel()
	if err == nil {
		g.resume()
	}
	if !g.isShared() {
		g.mu.Lock()
		g.enterFallback(errors.New("not reached at start"))
		g.mu.Unlock()
	}
	return g, nil
}

// receive hands each grant message to its gate.
func (c *Client) receive(msgs <-chan *redis.Message) {
	defer c.done.Done()
	for m := range msgs {
		c.mu.Lock()
		g := c.gates[m.Channel]
		h := c.handlers[m.Channel]
		c.mu.Unlock()
		switch {
		case g != nil:
			g.grantedElsewhere(m.Payload)
		case h != nil:
			h(m.Payload)
		}
	}
}

// beat renews every gate's lease, reconciles its grants, and, for a gate
// on its fallback, probes Redis and resumes the shared gate.
func (c *Client) beat() {
	defer c.done.Done()
	probe := min(c.interval, 500*time.Millisecond)
	t := time.NewTicker(probe)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		c.mu.Lock()
		gates := make([]*Gate, 0, len(c.gates))
		for _, g := range c.gates {
			gates = append(gates, g)
		}
		ticks := c.ticks
		c.mu.Unlock()
		for _, f := range ticks {
			f()
		}
		due := time.Since(last) >= c.interval
		if due {
			last = time.Now()
		}
		for _, g := range gates {
			if !g.isShared() {
				g.probe()
			} else if due {
				g.heartbeat()
			}
		}
	}
}

// run calls script with the gate's keys and the common arguments, under
// the timeout, and parses its reply.
func (c *Client) run(s *redis.Script, g *Gate, epoch uint64, extra ...any) (reply, error) {
	args := make([]any, 0, 5+len(extra))
	args = append(args, c.replica, epoch, g.capacity, c.lease.Milliseconds(), g.channel)
	args = append(args, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.Timeout)
	defer cancel()
	c.calls.Add(1)
	v, err := s.Run(ctx, c.rdb, g.keys, args...).Slice()
	if err != nil {
		c.errors.Add(1)
		return reply{}, err
	}
	return parseReply(v)
}

// eval runs s on keys with args under the timeout, counting the round
// trip (and the error, if any).
func (c *Client) eval(s *redis.Script, keys []string, args ...any) ([]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.Timeout)
	defer cancel()
	c.calls.Add(1)
	v, err := s.Run(ctx, c.rdb, keys, args...).Slice()
	if err != nil {
		c.errors.Add(1)
	}
	return v, err
}

// subscribe makes h hear every message on channel, from now and after
// each reconnection.
func (c *Client) subscribe(channel string, h func(msg string)) {
	c.mu.Lock()
	if c.handlers == nil {
		c.handlers = map[string]func(string){}
	}
	c.handlers[channel] = h
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.Timeout)
	c.ps.Subscribe(ctx, channel) // remembered, and renewed on reconnect, even if it fails now
	cancel()
}

// onTick makes f run on every heartbeat tick (every 0.5 s or LeaseTTL/4,
// if shorter), on the heartbeat's goroutine: a shared part probes Redis
// there while it is on its fallback.
func (c *Client) onTick(f func()) {
	c.mu.Lock()
	c.ticks = append(c.ticks, f)
	c.mu.Unlock()
}

// ping asks Redis whether it answers, within the timeout.
func (c *Client) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.Timeout)
	defer cancel()
	c.calls.Add(1)
	return c.rdb.Ping(ctx).Err()
}

// Collectors are the client's metrics, for a Prometheus registry:
// sluice_gate_fallback, sluice_gate_replicas,
// sluice_gate_redis_errors_total and, for each shared part made before the
// call, sluice_redis_fallback{part} (docs/metrics.md).
func (c *Client) Collectors() []prometheus.Collector {
	out := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_gate_fallback",
			Help: "1 while the shared gate cannot reach Redis and this replica runs on its local fallback cap of ceil(cap / replicas), else 0."},
			func() float64 { return float64(min(c.fallback.Load(), 1)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_gate_replicas",
			Help: "Replicas sharing the gate, as last seen alive in Redis."},
			func() float64 { return float64(c.replicas.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_gate_redis_errors_total",
			Help: "Redis calls of the shared gate that failed or timed out."},
			func() float64 { return float64(c.errors.Load()) }),
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.parts {
		out = append(out, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_redis_fallback",
			Help:        "1 while this shared part (buckets: the rate-limit buckets; cache: the cache groups) cannot reach Redis and runs on this replica's own, else 0.",
			ConstLabels: prometheus.Labels{"part": o.part}}, o.gauge))
	}
	return out
}

// crash stops the client as a killed process would: no goodbye, its
// leases left in Redis to expire. For tests.
func (c *Client) crash() {
	c.close.Do(func() {
		close(c.stop)
		c.ps.Close()
		c.done.Wait()
		c.rdb.Close()
	})
}

// Close stops the heartbeat, takes this replica's leases and tickets out
// of Redis (its slots pass to the others at once, not after the TTL), and
// closes the connections. Call it once every ticket is done.
func (c *Client) Close() error {
	err := errors.New("redisgate: closed twice")
	c.close.Do(func() { err = c.shut() })
	return err
}

func (c *Client) shut() error {
	close(c.stop)
	c.mu.Lock()
	gates := make([]*Gate, 0, len(c.gates))
	for _, g := range c.gates {
		gates = append(gates, g)
	}
	c.mu.Unlock()
	for _, g := range gates {
		c.run(byeScript, g, 0)
	}
	c.ps.Close()
	c.done.Wait()
	return c.rdb.Close()
}
