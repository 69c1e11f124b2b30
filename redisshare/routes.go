package redisshare

import (
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/redisconn"
	"github.com/sluicehq/sluice/route"
)

// Routes carries the routing pool's news between the replicas on one
// Redis (route.Share): which keys hold which prompt prefixes, which are
// skipped after failures. Publish never waits: messages queue in memory
// (up to routesQueue; past it they are dropped, and each replica routes
// on what it knows itself) and one goroutine sends them, gathered, every
// routesEvery, in one PUBLISH. Every replica hears every other's on one
// channel.
type Routes struct {
	c       *redisconn.Client
	channel string

	mu     sync.Mutex
	queued []string
	wake   chan struct{}
	stop   chan struct{}
	done   sync.WaitGroup
	closed bool
}

var _ route.Share = (*Routes)(nil)

const (
	routesQueue = 4096
	routesEvery = 20 * time.Millisecond
)

// NewRoutes returns the shared routing news called name on c. It starts
// one goroutine, stopped by Close (or the client's).
func NewRoutes(c *redisconn.Client, name string) *Routes {
	r := &Routes{c: c, channel: "{" + name + "}:news", wake: make(chan struct{}, 1), stop: make(chan struct{})}
	r.done.Add(1)
	go r.send()
	c.OnClose(r.Close)
	return r
}

// Publish queues msg for the other replicas; it drops it when the queue
// is full (Redis down or slow).
func (r *Routes) Publish(msg string) {
	r.mu.Lock()
	if len(r.queued) < routesQueue && !r.closed {
		r.queued = append(r.queued, msg)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Listen makes f hear every other replica's messages.
func (r *Routes) Listen(f func(msg string)) {
	me := r.c.Replica()
	r.c.Handle(r.channel, func(payload string) {
		from, body, ok := strings.Cut(payload, "\n")
		if !ok || from == me {
			return
		}
		for _, m := range strings.Split(body, "\n") {
			if m != "" {
				f(m)
			}
		}
	})
	r.c.Subscribe(r.channel) // remembered, and renewed on reconnect, even if it fails now
}

var publishScript = redis.NewScript(`return redis.call('PUBLISH', KEYS[1], ARGV[1])`)

// send sends what is queued, gathered, until Close.
func (r *Routes) send() {
	defer r.done.Done()
	t := time.NewTicker(routesEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-r.wake:
		}
		select { // gather what comes within routesEvery
		case <-r.stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		batch := r.queued
		r.queued = nil
		r.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		// A failed send is dropped: the news is a hint, and a replica
		// that missed it learns the same from its own answers.
		_, _ = r.c.Eval(publishScript, []string{r.channel}, r.c.Replica()+"\n"+strings.Join(batch, "\n"))
	}
}

// Close stops the sending; what is queued is dropped.
func (r *Routes) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	r.done.Wait()
}
