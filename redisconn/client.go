// Package redisconn is one replica's connection to the Redis its fleet
// shares state through: the Redis client, one subscription whose messages
// it hands to the part that listens on each channel, a tick on which the
// parts renew their leases and probe Redis while it is down, and the
// metrics of the Redis calls. The shared gate (gate/redisgate) and the
// shared rate-limit buckets and cache groups (redisshare) are built on
// one Client; docs/scaling.md tells how to run them and how far they
// carry.
package redisconn

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

	"github.com/sluicehq/sluice/internal/redact"
)

// Options configure a Client.
type Options struct {
	// URL is the Redis to share state through: redis://[:password@]host:port[/db],
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

// Client is one replica's connection to the shared state: the Redis
// client, the subscription every part's messages arrive on, and the
// heartbeat. One per process; the gate and the other shared parts are
// made on it (redisgate.Open, redisshare.NewBuckets, ...).
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
	handlers map[string]func(msg string) // by channel: the gates' grants, the cache groups' begun
	ticks    []func(heartbeat bool)      // called on each tick: the parts' heartbeats and probes
	closers  []func()                    // called by Close before the connections close: the gates' goodbyes
	parts    []*Outage                   // the shared parts other than the gates, for the gauge

	calls    atomic.Int64 // Redis round trips made, for the tests and the bench
	errors   atomic.Int64
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
		return nil, errors.New("redis: REDIS_URL is not a URL")
	}
	ro, err := redis.ParseURL(opt.URL)
	if err != nil {
		return nil, fmt.Errorf("redis: REDIS_URL %s: %s", redact.URL(u), scrub(err.Error(), password(u)))
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
		log: opt.Logger, addr: Redacted(opt.URL), interval: opt.LeaseTTL / 4, lease: opt.LeaseTTL * 7 / 10,
		handlers: map[string]func(string){}, stop: make(chan struct{})}
	c.ps = c.rdb.Subscribe(context.Background())
	msgs := c.ps.Channel(redis.WithChannelSize(1024))
	c.done.Add(2)
	go c.receive(msgs)
	go c.beat()
	return c, nil
}

// Redacted is rawURL with its password and query values hidden, for a
// log; text that is no URL is not shown at all.
func Redacted(rawURL string) string { return redact.RawURL(rawURL) }

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

// ErrText is err's text for a log, without the password.
func (c *Client) ErrText(err error) string { return scrub(err.Error(), c.secret) }

// Log is the logger of Options.
func (c *Client) Log() *slog.Logger { return c.log }

// Addr is the Redis URL with its password hidden, for a log line.
func (c *Client) Addr() string { return c.addr }

// Replica is this replica's id in Redis.
func (c *Client) Replica() string { return c.replica }

// Options are the client's options, defaults filled in.
func (c *Client) Options() Options { return c.opt }

// Lease is how long each renewal of a replica's leases lasts: 0.7 ×
// LeaseTTL, so that reaping lands within the TTL.
func (c *Client) Lease() time.Duration { return c.lease }

// RoundTrips is how many Redis calls the client has made: scripts,
// heartbeats and probes, not the pub/sub messages it received.
func (c *Client) RoundTrips() int64 { return c.calls.Load() }

// Fleet is how many replicas share Redis: Options.Replicas if set, else
// those last seen alive (SawReplicas).
func (c *Client) Fleet() int {
	if c.opt.Replicas > 0 {
		return c.opt.Replicas
	}
	return int(c.replicas.Load())
}

// SawReplicas records n replicas alive in Redis, as a reply of the shared
// gate counted them.
func (c *Client) SawReplicas(n int) { c.replicas.Store(int32(n)) }

// receive hands each message to its channel's handler.
func (c *Client) receive(msgs <-chan *redis.Message) {
	defer c.done.Done()
	for m := range msgs {
		c.mu.Lock()
		h := c.handlers[m.Channel]
		c.mu.Unlock()
		if h != nil {
			h(m.Payload)
		}
	}
}

// beat runs every tick function every 0.5 s (or LeaseTTL/4 if shorter),
// telling each whether a heartbeat is due (every LeaseTTL/4).
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
		ticks := c.ticks
		c.mu.Unlock()
		due := time.Since(last) >= c.interval
		if due {
			last = time.Now()
		}
		for _, f := range ticks {
			f(due)
		}
	}
}

// Eval runs s on keys with args under the timeout, counting the round
// trip (and the error, if any).
func (c *Client) Eval(s *redis.Script, keys []string, args ...any) ([]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.Timeout)
	defer cancel()
	c.calls.Add(1)
	v, err := s.Run(ctx, c.rdb, keys, args...).Slice()
	if err != nil {
		c.errors.Add(1)
	}
	return v, err
}

// Handle makes h hear every message on channel; false if the channel has
// a handler already. Subscribe then listens on it.
func (c *Client) Handle(channel string, h func(msg string)) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.handlers[channel]; dup {
		return false
	}
	c.handlers[channel] = h
	return true
}

// Subscribe listens on channel, from now and after each reconnection: the
// subscription is remembered, and renewed on reconnect, even if it fails
// now (the error says it did).
func (c *Client) Subscribe(channel string) error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.Timeout)
	defer cancel()
	return c.ps.Subscribe(ctx, channel)
}

// OnTick makes f run on every heartbeat tick (every 0.5 s or LeaseTTL/4,
// if shorter), on the heartbeat's goroutine, heartbeat true every
// LeaseTTL/4: a gate renews its leases then, and a shared part on its
// fallback probes Redis on every tick.
func (c *Client) OnTick(f func(heartbeat bool)) {
	c.mu.Lock()
	c.ticks = append(c.ticks, f)
	c.mu.Unlock()
}

// OnClose makes f run when Close is called, after the heartbeat stops and
// before the connections close: a gate takes its leases out of Redis.
func (c *Client) OnClose(f func()) {
	c.mu.Lock()
	c.closers = append(c.closers, f)
	c.mu.Unlock()
}

// Ping asks Redis whether it answers, within the timeout.
func (c *Client) Ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opt.Timeout)
	defer cancel()
	c.calls.Add(1)
	return c.rdb.Ping(ctx).Err()
}

// Collectors are the client's metrics, for a Prometheus registry:
// sluice_gate_replicas, sluice_gate_redis_errors_total and, for each
// shared part made before the call, sluice_redis_fallback{part}
// (docs/metrics.md). The gate's own is redisgate.Gate.Collectors.
func (c *Client) Collectors() []prometheus.Collector {
	out := []prometheus.Collector{
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

// Crash stops the client as a killed process would: no goodbye, its
// leases left in Redis to expire. For tests.
func (c *Client) Crash() {
	c.close.Do(func() {
		close(c.stop)
		c.ps.Close()
		c.done.Wait()
		c.rdb.Close()
	})
}

// Close stops the heartbeat, runs the OnClose functions (a gate takes
// this replica's leases and tickets out of Redis: its slots pass to the
// others at once, not after the TTL), and closes the connections. Call it
// once every ticket is done.
func (c *Client) Close() error {
	err := errors.New("redisconn: closed twice")
	c.close.Do(func() { err = c.shut() })
	return err
}

func (c *Client) shut() error {
	close(c.stop)
	c.mu.Lock()
	closers := c.closers
	c.mu.Unlock()
	for _, f := range closers {
		f()
	}
	c.ps.Close()
	c.done.Wait()
	return c.rdb.Close()
}
