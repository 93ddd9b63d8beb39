package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingShutdownTimeout bounds the flush of the last spans at shutdown: a
// collector that is gone must not hold the portal's exit.
const tracingShutdownTimeout = 5 * time.Second

// startTracing returns the tracer of the decisions' spans and the function
// that flushes and stops it, or a nil tracer (and a no-op) when traces are
// off. The exporter is OTLP/HTTP, configured by the OpenTelemetry SDK from
// the process environment: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, _HEADERS, _TIMEOUT and so on;
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the service
// (sluice-portal by default), OTEL_TRACES_SAMPLER samples.
func startTracing(ctx context.Context, cfg tracingConfig, logger *slog.Logger) (trace.Tracer, func(), error) {
	if !cfg.OTLP {
		return nil, func() {}, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" && v != "http/protobuf" {
			return nil, nil, fmt.Errorf("invalid %s=%s: the portal exports traces over OTLP/HTTP only; want http/protobuf or unset", name, v)
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("PORTAL_TRACES=otlp: the OTLP exporter: %w", err)
	}
	// Later detectors win: the environment's service name over the default.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "sluice-portal")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	logger.Info("exporting a trace span per rate-limit decision over OTLP/HTTP (PORTAL_TRACES=otlp)")
	return tp.Tracer("github.com/sluicehq/sluice"), func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			logger.Warn("flushing the last trace spans", "err", err)
		}
	}, nil
}
