// Package tracing sets up OpenTelemetry tracing for an Inlet process and
// carries trace context where Inlet's work crosses a boundary: from the
// ingress request, through the event and job rows (trace_parent), through
// the bus message's metadata, to the handler's attempt. Off unless an OTLP
// endpoint is configured; then spans are exported over OTLP/HTTP.
//
// Spans carry ids Inlet assigns (inlet.job_id, inlet.event_id), handler and
// source names, event types, outcomes and error classes; never a body, a
// header value, a provider's event id or an error's text.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Config says where spans go.
type Config struct {
	// Endpoint is the OTLP/HTTP collector, e.g. http://otel-collector:4318
	// (spans are POSTed to /v1/traces unless the URL has a path). "" turns
	// tracing off.
	Endpoint string
	// SampleRatio is the share of new traces kept (0 ≤ r ≤ 1; 0: none); a
	// span with a parent (a remote one: an event's trace_parent, a bus
	// message's traceparent) is sampled as its parent was, whatever the
	// ratio. Defaults to 1 (nil). A pointer, so that an explicit 0 is kept.
	SampleRatio *float64
	// Service names this process: inlet-ingress, inlet-streamer, ...
	Service string
}

var propagator = propagation.TraceContext{}

// Setup installs the global tracer provider of cfg and returns its shutdown,
// which flushes pending spans. With no endpoint it installs nothing (the
// global provider stays a no-op) and shutdown does nothing.
func Setup(ctx context.Context, cfg Config) (shutdown func(context.Context) error, err error) {
	if cfg.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tracing.otlp_endpoint: want an http:// or https:// URL")
	}
	if strings.Trim(u.Path, "/") == "" {
		u.Path = "/v1/traces"
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName(cfg.Service))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler(cfg.SampleRatio)),
	)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// sampler keeps ratio (nil: 1) of the traces this process starts (0: none)
// and follows the parent of every other span: a trace sampled where it
// started stays whole across processes. Ingress starts a new root for each
// webhook (a sender's traceparent is not followed), so the parents are
// Inlet's own.
func sampler(ratio *float64) sdktrace.Sampler {
	r := 1.0
	if ratio != nil {
		r = *ratio
	}
	return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(r))
}

// Tracer is the tracer of an Inlet package.
func Tracer(pkg string) trace.Tracer {
	return otel.Tracer("github.com/inlet-dev/inlet/" + pkg)
}

// TraceParent is the W3C traceparent of ctx's span, "" when it is not
// sampled (nothing would be exported to link to).
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// WithTraceParent is ctx with the remote span context of traceparent (as
// stored in a row) as the parent of spans started from it.
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// SetTraceParent writes traceparent (TraceParent of a span) into a bus
// message's metadata, where a one-reference message carries it; "" writes
// nothing.
func SetTraceParent(msg *message.Message, traceparent string) {
	if traceparent != "" {
		msg.Metadata.Set("traceparent", traceparent)
	}
}

// Extract is ctx with the trace context a bus message carries.
func Extract(ctx context.Context, msg *message.Message) context.Context {
	return WithTraceParent(ctx, msg.Metadata.Get("traceparent"))
}
