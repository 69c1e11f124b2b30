package redistest

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/redisconn"
)

// Open opens a redisconn.Client on url for the test, closed when it ends,
// with its pool warmed up so that a synctest bubble never has to dial.
// Its log is discarded unless opt has a logger.
func Open(t testing.TB, url string, opt redisconn.Options) *redisconn.Client {
	t.Helper()
	opt.URL = url
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := redisconn.Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() { c.Ping() })
	}
	wg.Wait()
	return c
}

// names numbers Name's names.
var names atomic.Int64

// Name is a name no other call in this test binary gets, for a shared
// part, so that the parts of one Redis do not share state across tests.
func Name() string { return fmt.Sprintf("test%d", names.Add(1)) }
