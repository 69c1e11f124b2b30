package overhead

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"
)

// The go-proxy child is the least a Go proxy can be: net/http's server and
// httputil.ReverseProxy over an http.Transport with the keep-alive and
// pool settings of sluice's own (upstream.New) and its server's timeouts
// (proxy.Server), no access line, no metrics, no policy. Its row says what
// any net/http proxy costs on the machine, so that sluice's gap to it is
// sluice's own work and its gap to HAProxy the language's and runtime's.
// The settings are copied, not imported: the yardstick must not move when
// sluice's packages do.

// goProxyIdlePerHost is sluice's pool: upstream.New keeps at least 100
// idle connections per host, BATCH_MAX_CONCURRENCY when it is larger.
func goProxyIdlePerHost(cap int) int { return max(cap, 100) }

// newGoProxy is the go-proxy's handler, relaying to upstream. Streams are
// flushed event by event: ReverseProxy flushes a text/event-stream answer
// at once, as sluice does. The request body is read whole before it is
// sent on, as sluice reads it, and sent from memory, which the transport
// can resend on a pooled connection that turns out closed. Forwarding
// net/http's body reader itself, ReverseProxy's default, cut 1 to 6
// streams in 10,000 short on this benchmark's stream phase (the upstream
// read failed with "use of closed network connection", the client saw an
// unexpected EOF), which would make the yardstick's row a row of errors.
func newGoProxy(upstream *url.URL, idlePerHost int) *httputil.ReverseProxy {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   idlePerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			b, err := io.ReadAll(pr.In.Body)
			if err != nil {
				pr.Out.Body, pr.Out.ContentLength = http.NoBody, 0 // the client is gone; whatever is sent is not read
				return
			}
			pr.Out.Body = io.NopCloser(bytes.NewReader(b))
			pr.Out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		},
		Transport: tr,
		// Without a pool ReverseProxy allocates a 32 KB copy buffer per
		// answer; anyone measuring a Go proxy would give it one.
		BufferPool: &copyBuffers{},
	}
}

// copyBuffers is ReverseProxy's BufferPool over a sync.Pool.
type copyBuffers struct{ p sync.Pool }

func (b *copyBuffers) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *copyBuffers) Put(buf []byte) { b.p.Put(&buf) }

// serveGoProxy serves the go-proxy in front of sp.URL on a free loopback
// port, writes its address as one line, and serves until it is signalled.
func serveGoProxy(stdout io.Writer, sp childSpec) error {
	up, err := url.Parse(sp.URL)
	if err != nil || up.Host == "" {
		return fmt.Errorf("go-proxy: upstream %q: %v", sp.URL, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, ln.Addr().String())
	srv := &http.Server{
		Handler:           newGoProxy(up, goProxyIdlePerHost(sp.Pool)),
		ReadHeaderTimeout: 10 * time.Second,  // as proxy.Server
		IdleTimeout:       120 * time.Second, // proxy.IdleTimeout
		MaxHeaderBytes:    1 << 20,
	}
	return srv.Serve(ln)
}
