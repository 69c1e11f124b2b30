package sim

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/sluicehq/sluice/assemble"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// throughSluice makes startSim put a windowed sluice in front of the
// simulator, so that the SDK tests also prove sluice transparent. The tests
// do not run in parallel, so a package variable is safe.
var throughSluice bool

// startSluice serves a windowed sluice in front of upstream.
func startSluice(t *testing.T, upstream string) *httptest.Server {
	t.Helper()
	cfg := config.Default()
	cfg.Enabled = true
	cfg.MaxWait = 2 * time.Millisecond
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	cfg.UpstreamURL = u
	parts, err := assemble.Build(cfg, assemble.Env{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(cfg, proxy.Options{Logger: slog.New(slog.DiscardHandler), ParkWhenQueued: -1, Parts: *parts}) // the SDKs get parked answers
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(p)
	srv.Listener = p.Listener(srv.Listener) // windowed requests are parked, as under sluice serve
	srv.Start()
	t.Cleanup(func() { srv.Close(); p.Shutdown(context.Background()); p.Close() })
	return srv
}

// TestSDKThroughSluice runs every official-SDK test again with sluice
// between the SDK and the simulator.
func TestSDKThroughSluice(t *testing.T) {
	throughSluice = true
	defer func() { throughSluice = false }()
	for name, test := range map[string]func(*testing.T){
		"v2/messages": TestSDKv2Messages, "v2/tool-use": TestSDKv2ToolUse,
		"v2/count-tokens-models": TestSDKv2CountTokensAndModels, "v2/errors": TestSDKv2Errors,
		"v2/retries-overloaded": TestSDKv2RetriesOverloaded, "v2/batch": TestSDKv2Batch,
		"v2/thinking": TestSDKv2Thinking,
		"v1/messages": TestSDKv1Messages, "v1/tool-use": TestSDKv1ToolUse,
		"v1/count-tokens-models": TestSDKv1CountTokensAndModels, "v1/errors": TestSDKv1Errors,
		"v1/retries-overloaded": TestSDKv1RetriesOverloaded, "v1/batch": TestSDKv1Batch,
		"v1/thinking": TestSDKv1Thinking,
	} {
		t.Run(name, test)
	}
}
