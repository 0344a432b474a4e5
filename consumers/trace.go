package consumers

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The SDK uses the OpenTelemetry API only: the program picks the exporter and
// passes its TracerProvider (Config.TracerProvider).

// tracerName names the SDK's tracer.
const tracerName = "github.com/inlet-dev/inlet/consumers"

var propagator = propagation.TraceContext{}

// traceParentKey is the bus message metadata that carries the W3C
// traceparent of the streamer's span.
const traceParentKey = "traceparent"

// messageTraceParent is the traceparent a job reference carries, "" when it
// carries none or an unsampled one (nothing would be exported to link to).
func messageTraceParent(msg *message.Message) string {
	return sampledTraceParent(msg.Metadata.Get(traceParentKey))
}

// sampledTraceParent is traceparent when it parses and is sampled, else "".
func sampledTraceParent(traceparent string) string {
	if traceparent == "" {
		return ""
	}
	ctx := withTraceParent(context.Background(), traceparent)
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c[traceParentKey]
}

// withTraceParent is ctx with the remote span context of traceparent as the
// parent of spans started from it.
func withTraceParent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{traceParentKey: traceparent})
}
