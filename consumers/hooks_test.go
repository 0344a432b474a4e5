package consumers_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/inlet-dev/inlet/consumers"
	"github.com/inlet-dev/inlet/consumers/bus"
	"github.com/inlet-dev/inlet/consumers/internal/consumertest"
)

// countingMetrics keeps every AttemptFinished call.
type countingMetrics struct {
	mu    sync.Mutex
	calls []string // "handler outcome class"
}

func (m *countingMetrics) AttemptFinished(handler, outcome string, class consumers.ErrorClass, took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if took <= 0 {
		outcome += " (no duration)"
	}
	m.calls = append(m.calls, handler+" "+outcome+" "+string(class))
}

func (m *countingMetrics) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// The program's Metrics hears of every finished attempt, with its outcome
// and error class.
func TestMetricsCountEachAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := &countingMetrics{}
	cfg := b.config(
		consumers.Handler{Name: "fails", MaxAttempts: 2, Backoff: noBackoff,
			Func: func(context.Context, *consumers.Event) error { return errors.New("no") }},
		consumers.Handler{Name: "works", Func: ok},
	)
	cfg.Metrics = m
	b.start(t, cfg)
	b.StartStreamer(t, consumertest.StreamerOptions{})

	eventID := b.InsertEvent(t, consumertest.EventParams{})
	b.WaitJobStatus(t, b.JobID(t, eventID, "fails"), "dead_letter", wait)
	b.WaitJobStatus(t, b.JobID(t, eventID, "works"), "completed", wait)
	want := []string{"fails dead_letter handler_error", "fails failed handler_error", "works completed "}
	consumertest.WaitFor(t, wait, "three counted attempts", func() bool { return len(m.Calls()) == len(want) })
	got := m.Calls()
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("counted %q, want %q", got, want)
	}
	if o := consumers.Outcomes(); !slices.Equal(o, []string{"completed", "failed", "dead_letter", "lost", "record_error", "given_back"}) {
		t.Errorf("Outcomes() = %q", o)
	}
}

// spanRecorder is a TracerProvider that remembers the spans started and
// the trace each joined.
type spanRecorder struct {
	noop.TracerProvider
	mu    sync.Mutex
	spans []string // "name trace-id"
}

func (r *spanRecorder) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return recordingTracer{r: r}
}

func (r *spanRecorder) Spans() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.spans)
}

type recordingTracer struct {
	noop.Tracer
	r *spanRecorder
}

func (t recordingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	t.r.mu.Lock()
	t.r.spans = append(t.r.spans, name+" "+trace.SpanContextFromContext(ctx).TraceID().String())
	t.r.mu.Unlock()
	return t.Tracer.Start(ctx, name, opts...)
}

// The attempt's span comes from the program's TracerProvider and joins the
// trace the job reference carries; the handler sees that trace. Without a
// provider the handler still sees it.
func TestAttemptJoinsTheReferencesTrace(t *testing.T) {
	t.Parallel()
	const (
		traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
		traceparent = "00-" + traceID + "-00f067aa0ba902b7-01"
	)
	for _, withProvider := range []bool{true, false} {
		b := setup(t)
		rec := &spanRecorder{}
		seen := make(chan string, 1)
		cfg := b.config(consumers.Handler{Name: "traced", Func: func(ctx context.Context, _ *consumers.Event) error {
			seen <- trace.SpanContextFromContext(ctx).TraceID().String()
			return nil
		}})
		if withProvider {
			cfg.TracerProvider = rec
		}
		b.start(t, cfg)
		eventID := b.InsertEvent(t, consumertest.EventParams{})
		refs := b.ClaimOnce(t, time.Minute)
		if len(refs) != 1 {
			t.Fatalf("claimed %d jobs, want 1", len(refs))
		}
		msg, err := bus.NewMessage(refs[0])
		if err != nil {
			t.Fatal(err)
		}
		msg.Metadata.Set("traceparent", traceparent)
		if err := b.Bus.Publish(bus.Topic("traced"), msg); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-seen:
			if got != traceID {
				t.Errorf("provider %v: the handler's trace is %s, want %s", withProvider, got, traceID)
			}
		case <-time.After(wait):
			t.Fatalf("provider %v: handler not called", withProvider)
		}
		b.WaitJobStatus(t, b.JobID(t, eventID, "traced"), "completed", wait)
		if want := []string{"inlet.consumer.attempt " + traceID}; withProvider && !slices.Equal(rec.Spans(), want) {
			t.Errorf("spans %q, want %q", rec.Spans(), want)
		}
	}
}
