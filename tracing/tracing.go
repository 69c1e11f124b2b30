// Package tracing builds sluice's OpenTelemetry tracer provider: off unless
// TRACING_ENABLED, and then an OTLP/HTTP (protobuf) exporter behind a batch
// span processor, configured by the standard OTEL_* variables, which the
// SDK reads itself (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES and the rest).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is the service.name of sluice's spans unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says
// otherwise.
const DefaultServiceName = "sluice"

// Provider is the tracer provider the proxy traces with, and its shutdown.
type Provider struct {
	// TracerProvider is nil when tracing is off: the proxy then does no
	// tracing work at all, not even a no-op tracer's.
	TracerProvider trace.TracerProvider
	shutdown       func(context.Context) error
}

// Shutdown flushes the spans still batched and stops the exporter; a
// no-op when tracing is off. Call it once the server has drained, so
// that the last requests' spans are sent.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.shutdown == nil {
		return nil
	}
	return p.shutdown(ctx)
}

// New builds the provider. enabled is TRACING_ENABLED; the rest comes from
// the process environment, which the SDK reads itself.
// OTEL_SDK_DISABLED=true turns tracing off even when enabled, as the
// OpenTelemetry specification has every SDK do (Go's does not read it).
func New(ctx context.Context, enabled bool) (*Provider, error) {
	if !enabled || strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return &Provider{}, nil
	}
	// Only the HTTP/protobuf exporter is built in (it keeps gRPC out of
	// the binary): a setting asking for another protocol would otherwise
	// be ignored without a word, and the spans sent where nothing listens.
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := os.Getenv(name); v != "" {
			if v != "http/protobuf" {
				return nil, fmt.Errorf("invalid %s=%q: sluice exports traces over OTLP http/protobuf only; unset it or set it to http/protobuf", name, v)
			}
			break // the traces-specific one, when set, wins
		}
	}
	if v := os.Getenv("OTEL_TRACES_EXPORTER"); v != "" && v != "otlp" {
		if v == "none" {
			return &Provider{}, nil
		}
		return nil, fmt.Errorf("invalid OTEL_TRACES_EXPORTER=%q: sluice exports traces over OTLP only; unset it, or set it to otlp or none", v)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: build the OTLP exporter: %w", err)
	}
	// The default first and the environment after it: OTEL_SERVICE_NAME
	// and OTEL_RESOURCE_ATTRIBUTES override "sluice".
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", DefaultServiceName)), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: build the resource: %w", err)
	}
	// The sampler is the SDK's default, which honours OTEL_TRACES_SAMPLER
	// and OTEL_TRACES_SAMPLER_ARG; so do the batch processor's
	// OTEL_BSP_* variables.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, shutdown: tp.Shutdown}, nil
}
