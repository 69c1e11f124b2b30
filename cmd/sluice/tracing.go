package main

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/tracing"
)

// tracingFlushTimeout bounds the flush of the last spans at exit: an
// unreachable collector must not hold up a stop past the drain.
const tracingFlushTimeout = 5 * time.Second

// startTracing builds the tracer provider that TRACING_ENABLED and the
// OTEL_* variables ask for (none when off), and returns the function
// that flushes its spans at exit.
func startTracing(ctx context.Context, cfg config.Config, log *slog.Logger) (*tracing.Provider, func(), error) {
	tp, err := tracing.New(ctx, cfg.TracingEnabled)
	if err != nil {
		return nil, nil, err
	}
	if tp.TracerProvider == nil {
		return tp, func() {}, nil
	}
	// The SDK's own failures (a collector that refuses the spans, say)
	// go to sluice's log rather than to a logger of the SDK's.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: the OpenTelemetry SDK failed", "err", err)
	}))
	log.Info("tracing on: spans are sent over OTLP/HTTP as the OTEL_* variables say")
	return tp, func() {
		// A fresh context: ctx has ended by now (the signal that stops
		// sluice), and the flush is what is left to do.
		fctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(fctx); err != nil {
			log.Warn("tracing: the last spans could not be flushed", "err", err)
		}
	}, nil
}
