package cli

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/strata-mq/strata/lib/serve"
)

// serviceName is the CLI's service.name; OTEL_SERVICE_NAME overrides it.
const serviceName = "strata-cli"

// startTracing installs an OpenTelemetry tracer provider as the global one
// when the standard variables ask for traces to be exported
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, with
// OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf or grpc), so produce and
// consume trace their records as the services do. With no endpoint it
// does nothing: a CLI run costs no SDK. The returned function flushes the
// spans, waiting at most a few seconds for the collector.
func startTracing(ctx context.Context, e *Env) func() {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return func() {}
	}
	res, _ := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", serviceName)),
		resource.WithTelemetrySDK(),
		resource.WithProcessPID(),
		resource.WithFromEnv(),
	)
	tp, _, err := serve.NewTracerProvider(ctx, res)
	if err != nil {
		fmt.Fprintf(e.Stderr, "strata: traces are not exported: %v\n", err)
		return func() {}
	}
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) // an unreachable collector must not clutter the output
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}
}
