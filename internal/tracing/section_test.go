package tracing

import (
	"context"
	"math"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// An explicit sample_ratio: 0 is kept (not taken for unset, as cmp.Or did)
// and valid; unset is 1; a value outside [0, 1] or NaN is refused naming
// the key (review helper-261, fixed by helper-263).
func TestSectionSampleRatioZeroIsKept(t *testing.T) {
	t.Parallel()
	ratio := func(r float64) *float64 { return &r }
	if got := (Section{}).WithDefaults(); got.SampleRatio == nil || *got.SampleRatio != 1 || got.Ratio() != 1 {
		t.Errorf("unset sample_ratio defaults to %v, want 1", got.SampleRatio)
	}
	for _, r := range []float64{0, 0.25, 1} {
		s := Section{SampleRatio: ratio(r)}.WithDefaults()
		if s.Ratio() != r {
			t.Errorf("sample_ratio %g: after WithDefaults %g", r, s.Ratio())
		}
		if err := s.Validate(); err != nil {
			t.Errorf("sample_ratio %g: %v", r, err)
		}
	}
	for _, r := range []float64{-0.1, 1.5, math.NaN(), math.Inf(1)} {
		err := Section{SampleRatio: ratio(r)}.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), "tracing.sample_ratio") {
			t.Errorf("sample_ratio %g: %v, want an error naming tracing.sample_ratio", r, err)
		}
	}
}

// The sampler keeps ratio of the traces it starts (0: none, nil: all) and
// follows a remote parent's decision whatever the ratio: a trace sampled
// where it started (an event's stored trace_parent) stays whole.
func TestSamplerRatioZeroStartsNoSampledTrace(t *testing.T) {
	t.Parallel()
	zero := 0.0
	root := func(s sdktrace.Sampler, parent context.Context) bool {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(s))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		_, span := tp.Tracer("test").Start(parent, "span")
		defer span.End()
		return span.SpanContext().IsSampled()
	}
	sampledParent := WithTraceParent(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	unsampledParent := WithTraceParent(context.Background(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
	if !trace.SpanContextFromContext(sampledParent).IsValid() {
		t.Fatal("the test's traceparent does not parse")
	}
	for i := range 100 {
		if root(sampler(&zero), context.Background()) {
			t.Fatalf("ratio 0: root span %d sampled", i)
		}
	}
	if !root(sampler(nil), context.Background()) {
		t.Error("ratio unset: a root span is not sampled, want every one")
	}
	if !root(sampler(&zero), sampledParent) {
		t.Error("ratio 0: the child of a sampled remote parent is not sampled, want it followed")
	}
	if root(sampler(nil), unsampledParent) {
		t.Error("ratio 1: the child of an unsampled remote parent is sampled, want it followed")
	}
}
