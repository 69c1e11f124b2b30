package proxy

import (
	"context"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/memnet"
	"github.com/sluicehq/sluice/upstream"
)

// bubbleRig is an upstream, a proxy in front of it, and a client, all on
// in-memory networks inside a synctest bubble.
type bubbleRig struct {
	proxy  *Proxy
	client *http.Client
	url    string
}

// newBubbleRig must be called inside synctest.Test. It stops everything at
// the end of the test so that the bubble's goroutines exit.
func newBubbleRig(t *testing.T, windowed bool, upstreamHandler http.HandlerFunc, edit ...func(*config.Config)) *bubbleRig {
	t.Helper()
	return newBubbleRigWith(t, windowed, upstreamHandler, Options{}, edit...)
}

// newBubbleRigWith is newBubbleRig with options of the test's own (its
// Upstream and ParkWhenQueued are the rig's; its Logger, if nil, too).
func newBubbleRigWith(t *testing.T, windowed bool, upstreamHandler http.HandlerFunc, opt Options, edit ...func(*config.Config)) *bubbleRig {
	t.Helper()
	upLn := memnet.NewListener()
	upSrv := &http.Server{Handler: upstreamHandler}
	go upSrv.Serve(upLn)

	cfg := testConfig(t, "http://upstream.test", windowed, edit...)
	uc := upstream.New(cfg.UpstreamURL, upstream.Options{DialContext: upLn.Dial})
	opt.Upstream, opt.ParkWhenQueued = uc, -1
	if opt.Logger == nil {
		opt.Logger = quietLog
	}
	p, err := newProxy(t, cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	pxLn := memnet.NewListener()
	pxSrv := &http.Server{Handler: p}
	go pxSrv.Serve(p.Listener(pxLn))

	tr := &http.Transport{DialContext: pxLn.Dial}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		pxSrv.Close()
		p.Shutdown(context.Background())
		p.Close()
		upSrv.Close()
	})
	return &bubbleRig{proxy: p, client: &http.Client{Transport: tr}, url: "http://sluice.test"}
}
