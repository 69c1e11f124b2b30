package main

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/web"
)

// newHandler builds the proxy and, when UI_ENABLED, the page in front of
// it: /ui/ goes to the page, everything else to the proxy. ctx ends the
// page's live event streams, so that they do not hold up shutdown. With
// TRACING_ENABLED the proxy traces (see startTracing); call flushSpans
// once the server has drained.
func newHandler(ctx context.Context, cfg config.Config, log *slog.Logger) (p *proxy.Proxy, h http.Handler, flushSpans func(), err error) {
	tp, flushSpans, err := startTracing(ctx, cfg, log)
	if err != nil {
		return nil, nil, nil, err
	}
	opt := proxy.Options{Logger: log, IdleTimeout: proxy.IdleTimeout, TracerProvider: tp.TracerProvider}
	bk, err := startBulk(ctx, cfg, log)
	if err != nil {
		flushSpans()
		return nil, nil, nil, err
	}
	if bk != nil {
		opt.Bulk, opt.Collectors = bk, bk.Collectors()
		// Stopped after the drain, with the spans: no request is then
		// being stored.
		spans := flushSpans
		flushSpans = func() { bk.Close(); spans() }
	}
	var live *web.Live
	if cfg.UIEnabled {
		live = web.NewLive(nil)
		opt.Observer = live
	}
	p, err = proxy.New(cfg, opt)
	if err != nil {
		flushSpans()
		return nil, nil, nil, err
	}
	if !cfg.UIEnabled {
		return p, p, flushSpans, nil
	}
	live.SetGauges(func() web.Gauges {
		return web.Gauges{Windowed: cfg.Enabled, MaxSize: cfg.MaxSize, MaxWaitMS: int(cfg.MaxWait.Milliseconds()),
			Slots: cfg.MaxConcurrency, InFlight: p.GateStats().InFlight, Queued: p.Queued()}
	})
	ui := web.New(web.Options{Live: live, Context: ctx, Logger: log})
	return p, web.Mount(ui, p), flushSpans, nil
}
